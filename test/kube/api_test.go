package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The HTTP API's neuron calls through the Go SDK against `serve` in kube
// mode on the real API server, as internal/api's tests drive process
// mode: create with labels and environment, exec (stdin, exit code,
// binary output, timeout, streamed), background processes (input,
// output replayed from an offset, signals), files (5 MiB written and
// read back, a range, stat, mkdir, move, symlink, list, remove),
// terminals (size, exit code, re-attach with replay), labels and list
// selectors, destroy and create on the kept home, wipe.
func TestAPI(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.Start(t, core, cluster.Agents(rc), cfg) })
	const token = "fedcba9876543210fedcba9876543210"
	r := newReplica(t, buildCLI(t), serveEnv(t, rc, cfg, token))
	c, err := cortex.New("http://"+r.addr, cortex.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cr, err := c.Create(ctx, &cortex.CreateRequest{ID: "api", Mode: kube.Mode, Env: []string{"GREETING=hi"}, Labels: map[string]string{"team": "a"}})
	if err != nil || !cr.Started || cr.Status != "running" {
		t.Fatalf("create: %+v %v", cr, err)
	}
	n := c.Neuron("api")
	t.Run("Exec", func(t *testing.T) {
		res, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"sh", "-c", `cat; echo "$GREETING $A" >&2; exit 3`}, Env: []string{"A=1"}}, Stdin: "in\n"})
		if err != nil || res.ExitCode != 3 || res.Stdout != "in\n" || res.Stderr != "hi 1\n" {
			t.Fatalf("%+v %v", res, err)
		}
		res, err = n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: `printf '\377\000'`}})
		if out, _ := res.Output(); err != nil || !bytes.Equal(out, []byte{0xff, 0}) {
			t.Fatalf("binary output: %+v %v", res, err)
		}
		res, err = n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "sleep 5"}, TimeoutMs: 200})
		if err != nil || !res.TimedOut {
			t.Fatalf("timeout: %+v %v", res, err)
		}
		s, err := n.ExecStream(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "for i in 1 2 3; do echo $i; done; echo e >&2; exit 7"}})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		last, err := s.Copy(&out, &errb)
		if err != nil || last.Type != "exit" || last.Result.ExitCode != 7 || out.String() != "1\n2\n3\n" || errb.String() != "e\n" {
			t.Fatalf("stream: %+v %q %q %v", last, out.String(), errb.String(), err)
		}
	})
	t.Run("Processes", func(t *testing.T) {
		p, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Shell: "echo started; while read l; do echo got $l; done"}, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Input(ctx, p.PID, []byte("one\n"), true); err != nil {
			t.Fatal(err)
		}
		s, err := n.Output(ctx, p.PID, cortex.OutputOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if last, err := s.Copy(&out, nil); err != nil || last.Type != "end" || out.String() != "started\ngot one\n" {
			t.Fatalf("%+v %q %v", last, out.String(), err)
		}
		s, err = n.Output(ctx, p.PID, cortex.OutputOptions{StdoutOffset: 8, NoFollow: true})
		if err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if _, err := s.Copy(&out, nil); err != nil || out.String() != "got one\n" {
			t.Fatalf("replay from 8: %q %v", out.String(), err)
		}
		long, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Argv: []string{"sleep", "60"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Signal(ctx, long.PID, "TERM"); err != nil {
			t.Fatal(err)
		}
		var got *cortex.ProcInfo
		if !waittest.Until(20*time.Second, func() bool {
			got, err = n.Process(ctx, long.PID)
			return err == nil && !got.Running
		}) || got.Signal != "SIGTERM" {
			t.Fatalf("after SIGTERM: %+v %v", got, err)
		}
	})
	t.Run("Files", func(t *testing.T) {
		big := make([]byte, 5<<20+123)
		rand.Read(big)
		if w, err := n.WriteFile(ctx, "d/big", bytes.NewReader(big), &cortex.WriteOptions{Parents: true, Mode: 0o600}); err != nil || w != int64(len(big)) {
			t.Fatalf("%d %v", w, err)
		}
		if got, err := n.ReadFile(ctx, "d/big"); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("read back: %d bytes, %v", len(got), err)
		}
		rr, err := n.OpenRange(ctx, "d/big", 1<<20, 100)
		if err != nil {
			t.Fatal(err)
		}
		part, _ := io.ReadAll(rr)
		rr.Close()
		if !bytes.Equal(part, big[1<<20:1<<20+100]) {
			t.Fatalf("range: %d bytes", len(part))
		}
		if fi, err := n.Stat(ctx, "d/big"); err != nil || fi.Size != int64(len(big)) || fi.Mode&0o777 != 0o600 {
			t.Fatalf("%+v %v", fi, err)
		}
		if _, err := n.Mkdir(ctx, "e/f"); err != nil {
			t.Fatal(err)
		}
		if err := n.Move(ctx, &cortex.MoveRequest{From: "d/big", To: "e/f/big"}); err != nil {
			t.Fatal(err)
		}
		if err := n.Symlink(ctx, "f/big", "e/link"); err != nil {
			t.Fatal(err)
		}
		if fi, err := n.Lstat(ctx, "e/link"); err != nil || fi.Type != "symlink" || fi.Target != "f/big" {
			t.Fatalf("%+v %v", fi, err)
		}
		if list, err := n.List(ctx, "e"); err != nil || len(list) != 2 {
			t.Fatalf("%+v %v", list, err)
		}
		if err := n.Remove(ctx, "e", true); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Stat(ctx, "e"); !errors.As(err, &cortex.NotFoundError{}) {
			t.Fatalf("stat of a removed directory: %v", err)
		}
	})
	t.Run("Terminal", func(t *testing.T) {
		term, err := n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Argv: []string{"sh"}}, Cols: 100, Rows: 30})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := term.Write([]byte("stty size; echo mark-$((6*7)); exit 5\n")); err != nil {
			t.Fatal(err)
		}
		seen := readUntil(t, term, "mark-42")
		if !strings.Contains(seen, "30 100") {
			t.Errorf("the size: %q", seen)
		}
		if code, _, err := term.Wait(); err != nil || code != 5 {
			t.Fatalf("exit: %d %v", code, err)
		}
		term.Close()
		term, err = n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Argv: []string{"sh", "-c", "echo hello-attach; sleep 30"}}})
		if err != nil {
			t.Fatal(err)
		}
		pid := term.PID
		term.Close()
		again, err := n.Terminal(ctx, cortex.TerminalOptions{PID: pid})
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		readUntil(t, again, "hello-attach")
		if err := again.Kill(); err != nil {
			t.Fatal(err)
		}
		if _, sig, err := again.Wait(); err != nil || sig == "" {
			t.Fatalf("after kill: %q %v", sig, err)
		}
	})
	t.Run("Lifecycle", func(t *testing.T) {
		if _, err := c.Create(ctx, &cortex.CreateRequest{ID: "other", Mode: kube.Mode, Labels: map[string]string{"team": "b"}}); err != nil {
			t.Fatal(err)
		}
		list, err := c.List(ctx, cortex.ListOptions{LabelSelector: "team=a"})
		if err != nil || len(list) != 1 || list[0].ID != "api" {
			t.Fatalf("list team=a: %+v %v", list, err)
		}
		if err := c.Destroy(ctx, "other", true); err != nil {
			t.Fatal(err)
		}
		if _, err := n.WriteFile(ctx, "kept", strings.NewReader("yes"), nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Destroy(ctx, "api", false); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "true"}}); err == nil {
			t.Fatal("exec in a stopped neuron worked")
		}
		if _, err := c.Create(ctx, &cortex.CreateRequest{ID: "api", Mode: kube.Mode}); err != nil {
			t.Fatal(err)
		}
		if got, err := n.ReadFile(ctx, "kept"); err != nil || string(got) != "yes" {
			t.Fatalf("the home after destroy and create: %q %v", got, err)
		}
		if err := c.Destroy(ctx, "api", true); err != nil {
			t.Fatal(err)
		}
		if list, err := c.List(ctx); err != nil || len(list) != 0 {
			t.Fatalf("list after the wipes: %+v %v", list, err)
		}
	})
}

// readUntil reads term until what it has read holds want, and returns it.
func readUntil(t *testing.T, term *cortex.Terminal, want string) string {
	t.Helper()
	var seen bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), want) {
		k, err := term.Read(buf)
		seen.Write(buf[:k])
		if err != nil {
			t.Fatalf("%v after %q", err, seen.String())
		}
	}
	return seen.String()
}
