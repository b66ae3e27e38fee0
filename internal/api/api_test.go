package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

var agentBin string

func TestMain(m *testing.M) {
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = bin
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

// daemon is a server over a fresh home in process mode (real agents), and
// an SDK client of it.
type daemon struct {
	set *sandbox.Set
	srv *api.Server
	ts  *httptest.Server
	c   *cortex.Client
	lay layout.Layout
}

func newDaemon(t testing.TB, opts api.Options) *daemon {
	return newDaemonAt(t, opts, "")
}

// newDaemonAt is newDaemon with the neurons' data under overlays ("": the
// home's default).
func newDaemonAt(t testing.TB, opts api.Options, overlays string) *daemon {
	t.Helper()
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), overlays)
	if err != nil {
		t.Fatal(err)
	}
	env := sandbox.Env{Layout: lay, Exclusive: true, AgentBinary: func() (string, error) { return agentBin, nil }}
	set := sandbox.NewSet(env, process.Backend())
	opts.Set = set
	opts.Version = "test"
	srv := api.New(opts)
	ts := httptest.NewServer(srv.Handler())
	c, err := cortex.New(ts.URL, cortex.WithToken(opts.Token))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{set: set, srv: srv, ts: ts, c: c, lay: lay}
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		ctx := context.Background()
		all, _ := set.List(ctx)
		for _, st := range all {
			if m, err := set.Manager(st.Mode); err == nil {
				m.Destroy(ctx, st.ID, sandbox.DestroyOptions{Wipe: true})
			}
		}
		set.Close()
	})
	return d
}

func (d *daemon) create(t testing.TB, id string) *cortex.NeuronClient {
	t.Helper()
	if _, err := d.c.Create(context.Background(), &cortex.CreateRequest{ID: id, Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	return d.c.Neuron(id)
}

func TestNeurons(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	h, err := d.c.Health(ctx)
	if err != nil || h.Status != "ok" || len(h.Modes) != 1 {
		t.Fatalf("health: %+v %v", h, err)
	}
	cr, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "api1", Mode: process.Mode, Env: []string{"GREETING=hi"}})
	if err != nil || !cr.Started || cr.Status != "running" || cr.ID != "api1" || cr.ModeReason != "requested" {
		t.Fatalf("create: %+v %v", cr, err)
	}
	again, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "api1", Mode: process.Mode})
	if err != nil || again.Started {
		t.Fatalf("a second create of a running neuron: %+v %v", again, err)
	}
	list, err := d.c.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "api1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	n := d.c.Neuron("api1")
	if _, err := n.WriteFile(ctx, "kept", strings.NewReader("data"), nil); err != nil {
		t.Fatal(err)
	}
	res, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "echo $GREETING"}})
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("the create's env: %+v %v", res, err)
	}
	if err := d.c.Destroy(ctx, "api1", false); err != nil {
		t.Fatal(err)
	}
	got, err := d.c.Get(ctx, "api1")
	if err != nil || got.Status != "stopped" {
		t.Fatalf("after destroy: %+v %v", got, err)
	}
	if _, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"true"}}}); !errors.As(err, &cortex.NotRunningError{}) {
		t.Fatalf("exec in a stopped neuron: %v", err)
	}
	// Created again under its id: the data is back.
	if _, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "api1", Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	if b, err := n.ReadFile(ctx, "kept"); err != nil || string(b) != "data" {
		t.Fatalf("after recreate: %q %v", b, err)
	}
	if err := d.c.Destroy(ctx, "api1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Get(ctx, "api1"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("after a wipe: %v", err)
	}
	// A generated id.
	gen, err := d.c.Create(ctx, &cortex.CreateRequest{Mode: process.Mode})
	if err != nil || gen.ID == "" {
		t.Fatalf("%+v %v", gen, err)
	}
}

func TestExec(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "ex")
	res, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Env: []string{"A=1"}},
		Stdin: "in\n"})
	if err != nil || res.ExitCode != 3 || res.Stdout != "in\n" || res.Stderr != "err\n" {
		t.Fatalf("%+v %v", res, err)
	}
	res, err = n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "printf '\\377\\000'"}})
	if out, _ := res.Output(); err != nil || !bytes.Equal(out, []byte{0xff, 0}) || res.StdoutBase64 == "" {
		t.Fatalf("binary output: %+v %v", res, err)
	}
	res, err = n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "sleep 5"}, TimeoutMs: 200})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	// Streamed: the chunks, in order, then the exit.
	s, err := n.ExecStream(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	last, err := s.Copy(&out, &errb)
	if err != nil || last.Type != "exit" || last.Result.ExitCode != 7 || out.String() != "1\n2\n3\n" || errb.String() != "e\n" {
		t.Fatalf("stream: %+v %q %q %v", last, out.String(), errb.String(), err)
	}
	// A missing program is a result with status 127, as in a shell.
	res, err = n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"no-such-program-x"}}})
	if err != nil || res.ExitCode != 127 {
		t.Fatalf("missing program: %+v %v", res, err)
	}
}

func TestProcesses(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "pr")
	p, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Shell: "echo started; while read l; do echo got $l; done; echo bye >&2"}, Stdin: true})
	if err != nil || p.PID == 0 {
		t.Fatalf("%+v %v", p, err)
	}
	if err := n.Input(ctx, p.PID, []byte("one\n"), true); err != nil {
		t.Fatal(err)
	}
	s, err := n.Output(ctx, p.PID, cortex.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	last, err := s.Copy(&out, &errb)
	if err != nil || last.Type != "end" || last.Process.Running || out.String() != "started\ngot one\n" || errb.String() != "bye\n" {
		t.Fatalf("%+v %q %q %v", last, out.String(), errb.String(), err)
	}
	// Replay from an offset, after the fact.
	s, err = n.Output(ctx, p.PID, cortex.OutputOptions{StdoutOffset: 8, NoFollow: true})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if _, err := s.Copy(&out, nil); err != nil || out.String() != "got one\n" {
		t.Fatalf("replay from 8: %q %v", out.String(), err)
	}
	list, err := n.Processes(ctx)
	if err != nil || len(list) != 1 || list[0].PID != p.PID {
		t.Fatalf("%+v %v", list, err)
	}
	long, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Argv: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Signal(ctx, long.PID, "TERM"); err != nil {
		t.Fatal(err)
	}
	ended := func() bool {
		got, err := n.Process(ctx, long.PID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Running && got.Signal != "SIGTERM" {
			t.Fatalf("%+v", got)
		}
		return !got.Running
	}
	if !waittest.Until(30*time.Second, ended) {
		t.Fatal("SIGTERM did not end sleep")
	}
	if _, err := n.Process(ctx, 999999); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("%v", err)
	}
}

func TestFiles(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "fi")
	big := make([]byte, 5<<20+123)
	rand.Read(big)
	if w, err := n.WriteFile(ctx, "d/big", bytes.NewReader(big), &cortex.WriteOptions{Parents: true, Mode: 0o600}); err != nil || w != int64(len(big)) {
		t.Fatalf("%d %v", w, err)
	}
	got, err := n.ReadFile(ctx, "d/big")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	r, err := n.OpenRange(ctx, "d/big", 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(part, big[1<<20:1<<20+100]) {
		t.Fatalf("range: %d bytes", len(part))
	}
	fi, err := n.Stat(ctx, "d/big")
	if err != nil || fi.Size != int64(len(big)) || fi.Mode&0o777 != 0o600 {
		t.Fatalf("%+v %v", fi, err)
	}
	if p, err := n.Mkdir(ctx, "e/f"); err != nil || !strings.HasSuffix(p, "/e/f") {
		t.Fatalf("%q %v", p, err)
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
	list, err := n.List(ctx, "e")
	if err != nil || len(list) != 2 {
		t.Fatalf("%+v %v", list, err)
	}
	if err := n.Remove(ctx, "e", false); err == nil {
		t.Fatal("removing a non-empty directory without recursive worked")
	}
	if err := n.Remove(ctx, "e", true); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Stat(ctx, "e"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("%v", err)
	}
	// An empty file, and a range of it.
	if _, err := n.WriteFile(ctx, "empty", bytes.NewReader(nil), nil); err != nil {
		t.Fatal(err)
	}
	if b, err := n.ReadFile(ctx, "empty"); err != nil || len(b) != 0 {
		t.Fatalf("%q %v", b, err)
	}
}

func TestTerminal(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "te")
	term, err := n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Argv: []string{"sh"}}, Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := term.Write([]byte("stty size; echo mark-$((6*7)); exit 5\n")); err != nil {
		t.Fatal(err)
	}
	var seen bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), "mark-42") {
		k, err := term.Read(buf)
		seen.Write(buf[:k])
		if err != nil {
			t.Fatalf("%v after %q", err, seen.String())
		}
	}
	if !strings.Contains(seen.String(), "30 100") {
		t.Fatalf("the size: %q", seen.String())
	}
	code, _, err := term.Wait()
	if err != nil || code != 5 {
		t.Fatalf("exit: %d %v", code, err)
	}
	term.Close()
	// A terminal outlives its connection, and replays on attach.
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
	seen.Reset()
	for !strings.Contains(seen.String(), "hello-attach") {
		k, err := again.Read(buf)
		seen.Write(buf[:k])
		if err != nil {
			t.Fatalf("%v after %q", err, seen.String())
		}
	}
	if err := again.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, sig, err := again.Wait(); err != nil || sig == "" {
		t.Fatalf("after kill: %q %v", sig, err)
	}
	again.Close()
}

// raw sends a request without the SDK and returns status and body.
func raw(t *testing.T, d *daemon, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, d.ts.URL+path, strings.NewReader(body))
	if method == "POST" || method == "PATCH" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBadInput(t *testing.T) {
	d := newDaemon(t, api.Options{})
	d.create(t, "bad")
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, says               string
		hdr                      []string
	}{
		{"a form post", "POST", "/v1/neurons/bad/exec", `{"argv":["true"]}`, 400, "BAD_REQUEST", "application/json", []string{"Content-Type", "application/x-www-form-urlencoded"}},
		{"a rebound host name", "GET", "/v1/neurons", ``, 403, "POLICY_DENIED", "loopback", []string{"Host", "attacker.example:3100"}},
		{"text typed into a process", "POST", "/v1/neurons/bad/processes/1/input", `x`, 400, "BAD_REQUEST", "octet-stream", []string{"Content-Type", "text/plain"}},
		{"malformed JSON", "POST", "/v1/neurons/bad/exec", `{"argv":["true"]`, 400, "BAD_REQUEST", "not valid JSON", nil},
		// Found by FuzzDecodeJSON: the duplicate-key walk spun forever on it.
		{"unterminated string in a list", "POST", "/v1/neurons/bad/exec", `{"argv":["l`, 400, "BAD_REQUEST", "not valid JSON", nil},
		{"unknown field", "POST", "/v1/neurons/bad/exec", `{"argv":["true"],"cmd":"x"}`, 400, "BAD_REQUEST", `cmd`, nil},
		// A key given twice means two things to two readers: refused.
		// An API client names no host directory to base a neuron on.
		{"host directory as image", "POST", "/v1/neurons", `{"id":"img","image":"/"}`, 403, "POLICY_DENIED", "api.images", nil},
		{"docker image not built by Cortex", "POST", "/v1/neurons", `{"id":"img","image":"alpine:latest"}`, 403, "POLICY_DENIED", "api.images", nil},
		{"duplicate key", "POST", "/v1/neurons", `{"id":"a1","id":"a2"}`, 400, "BAD_REQUEST", `names \"id\" twice`, nil},
		{"duplicate key in another case", "POST", "/v1/neurons", `{"id":"a1","ID":"a2"}`, 400, "BAD_REQUEST", `names \"ID\" twice`, nil},
		{"nested duplicate key", "POST", "/v1/neurons", `{"id":"a1","limits":{"pids":1,"pids":99999}}`, 400, "BAD_REQUEST", `limits.pids`, nil},
		{"duplicate key in an argv exec", "POST", "/v1/neurons/bad/exec", `{"argv":["true"],"argv":["rm","-rf","/"]}`, 400, "BAD_REQUEST", "twice", nil},
		{"wrong type", "POST", "/v1/neurons/bad/exec", `{"argv":"true"}`, 400, "BAD_REQUEST", `argv\" must be a list of strings`, nil},
		{"no command", "POST", "/v1/neurons/bad/exec", `{}`, 400, "BAD_REQUEST", "argv or shell", nil},
		{"no body", "POST", "/v1/neurons", ``, 400, "BAD_REQUEST", "no JSON body", nil},
		{"bad id", "POST", "/v1/neurons", `{"id":"Bad Id!"}`, 400, "BAD_REQUEST", "id", nil},
		{"bad network", "POST", "/v1/neurons", `{"network":{"mode":"some"}}`, 400, "BAD_REQUEST", "none, egress or full", nil},
		{"unknown neuron", "GET", "/v1/neurons/nosuch", ``, 404, "NOT_FOUND", "nosuch", nil},
		{"unknown route", "GET", "/v2/x", ``, 404, "NOT_FOUND", "no route", nil},
		{"path escape", "GET", "/v1/neurons/bad/files?path=../../../../etc/passwd", ``, 403, "PATH_ESCAPE", "", nil},
		{"no path", "GET", "/v1/neurons/bad/files", ``, 400, "BAD_REQUEST", "path", nil},
		{"bad wipe", "DELETE", "/v1/neurons/bad?wipe=maybe", ``, 400, "BAD_REQUEST", "wipe", nil},
		{"bad pid", "GET", "/v1/neurons/bad/processes/x", ``, 400, "BAD_REQUEST", "process id", nil},
		{"big JSON", "POST", "/v1/neurons/bad/exec", `{"shell":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "TOO_LARGE", "limit", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := raw(t, d, c.method, c.path, c.body, c.hdr...)
			if status != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) || !strings.Contains(body, c.says) {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	d := newDaemon(t, api.Options{Token: "s3cret-token"})
	if _, err := d.c.Health(context.Background()); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret-token"}} {
		status, body := raw(t, d, "GET", "/v1/neurons", "", hdr...)
		if status != 401 || !strings.Contains(body, "UNAUTHORIZED") || strings.Contains(body, "s3cret") {
			t.Fatalf("%v: %d %s", hdr, status, body)
		}
	}
	if status, _ := raw(t, d, "GET", "/metrics", ""); status != 401 {
		t.Fatalf("metrics without the token: %d", status)
	}
	bad, _ := cortex.New(d.ts.URL, cortex.WithToken("nope"))
	if _, err := bad.List(context.Background()); !errors.As(err, &cortex.UnauthorizedError{}) {
		t.Fatalf("%v", err)
	}
}

// countingReader counts what the server read of an upload (the client's
// transport may still be reading it when the answer comes).
type countingReader struct {
	n    atomic.Int64
	size int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n := r.n.Load()
	if n >= r.size {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), r.size-n))
	clear(p[:k])
	r.n.Add(int64(k))
	return k, nil
}

func TestUploadLimit(t *testing.T) {
	d := newDaemon(t, api.Options{MaxUpload: 100 << 20})
	n := d.create(t, "up")
	ctx := context.Background()
	// 1 GiB announced: refused before the body is read.
	body := &countingReader{size: 1 << 30}
	_, err := n.WriteFile(ctx, "huge", body, &cortex.WriteOptions{Size: body.size})
	if !errors.As(err, &cortex.TooLargeError{}) {
		t.Fatalf("%v", err)
	}
	if n := body.n.Load(); n > 64<<20 {
		t.Fatalf("the server read %d bytes of a refused upload", n)
	}
	// Streamed without a length: cut at the limit, and nothing is left.
	body = &countingReader{size: 1 << 30}
	_, err = n.WriteFile(ctx, "huge", io.MultiReader(body), nil)
	if !errors.As(err, &cortex.TooLargeError{}) {
		t.Fatalf("%v", err)
	}
	if n := body.n.Load(); n > 200<<20 {
		t.Fatalf("the server read %d bytes past a 100 MiB limit", n)
	}
	list, err := n.List(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range list {
		t.Errorf("left behind: %s (%d bytes)", f.Name, f.Size)
	}
}

// A neuron killed while a command runs answers 409 NOT_RUNNING, at once.
func TestKilledMidExec(t *testing.T) {
	d := newDaemon(t, api.Options{})
	n := d.create(t, "kill")
	ctx := context.Background()
	st, err := d.c.Get(ctx, "kill")
	if err != nil {
		t.Fatal(err)
	}
	// The command outlives the test's deadline by far: an answer that
	// waited for it never comes in time.
	sleep := []string{"sleep", fmt.Sprint(3600 + os.Getpid()%100000)}
	running := func() []int {
		return sandboxtest.Processes(func(argv []string) bool { return slices.Equal(argv, sleep) })
	}
	t.Cleanup(func() {
		for _, pid := range running() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	answered := make(chan error, 1)
	go func() {
		_, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: sleep}})
		answered <- err
	}()
	waittest.For(t, 30*time.Second, "the command to run", func() bool { return len(running()) > 0 })
	syscall.Kill(st.PID, syscall.SIGKILL)
	err = waittest.Recv(t, 2*time.Minute, "the answer to the exec whose neuron was killed", answered)
	if !errors.As(err, &cortex.NotRunningError{}) {
		t.Fatalf("%v", err)
	}
	var ae cortex.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Fatalf("%+v", ae)
	}
	// And the next request too (the daemon forgot its channel).
	if _, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"true"}}}); !errors.As(err, &cortex.NotRunningError{}) {
		t.Fatalf("after: %v", err)
	}
}

// A client that goes away mid-stream ends the command it ran.
func TestDisconnectMidStream(t *testing.T) {
	d := newDaemon(t, api.Options{})
	n := d.create(t, "dis")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := n.ExecStream(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "echo $$ > dis.pid; while :; do echo tick; sleep 0.05; done"}, TimeoutMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(); err != nil || ev.Type != "stdout" {
		t.Fatalf("%+v %v", ev, err)
	}
	cancel()
	s.Close()
	bg := context.Background()
	pid, err := n.ReadFile(bg, "dis.pid")
	if err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		res, err := n.Exec(bg, &cortex.ExecRequest{Command: cortex.Command{Shell: "kill -0 " + strings.TrimSpace(string(pid))}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExitCode != 0
	}
	if !waittest.Until(30*time.Second, gone) {
		t.Fatal("the command outlived its client")
	}
	// The daemon still answers.
	if _, err := d.c.Health(bg); err != nil {
		t.Fatal(err)
	}
}

func TestMetrics(t *testing.T) {
	d := newDaemon(t, api.Options{})
	n := d.create(t, "me")
	ctx := context.Background()
	n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"true"}}})
	n.WriteFile(ctx, "m", strings.NewReader("12345"), nil)
	n.Stat(ctx, "nonexistent")
	status, body := raw(t, d, "GET", "/metrics", "")
	if status != 200 {
		t.Fatal(status)
	}
	for _, want := range []string{
		`cortex_neurons{mode="process",status="running"} 1`,
		`cortex_api_requests_total{route="POST /v1/neurons/{id}/exec",status="200"} 1`,
		`cortex_api_request_duration_seconds_count{route="POST /v1/neurons/{id}/exec"} 1`,
		`cortex_api_file_bytes_total{direction="upload"} 5`,
		`cortex_api_errors_total{code="NOT_FOUND"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
}

func TestCheckListener(t *testing.T) {
	// Loopback too: a neuron with network full shares it.
	lo := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 3100}
	if err := api.CheckListener(lo, ""); err == nil || !strings.Contains(err.Error(), "NSYS_CORTEX_API_TOKEN") {
		t.Fatalf("loopback without a token: %v", err)
	}
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 3100}
	if err := api.CheckListener(all, ""); err == nil || !strings.Contains(err.Error(), "NSYS_CORTEX_API_TOKEN") {
		t.Fatalf("%v", err)
	}
	if err := api.CheckListener(all, "t"); err != nil {
		t.Fatal(err)
	}
}

// Review regressions: nothing starts for a request that is not a
// WebSocket of this origin.
func TestTerminalNeedsAWebSocketOfThisOrigin(t *testing.T) {
	d := newDaemon(t, api.Options{})
	n := d.create(t, "ws")
	path := "/v1/neurons/ws/terminal?argv=sleep&argv=1000"
	if status, body := raw(t, d, "GET", path, ""); status != 400 || !strings.Contains(body, "WebSocket") {
		t.Fatalf("a plain GET: %d %s", status, body)
	}
	up := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	if status, body := raw(t, d, "GET", path, "", append(up, "Origin", "https://evil.example")...); status != 403 || !strings.Contains(body, "POLICY_DENIED") {
		t.Fatalf("a foreign origin: %d %s", status, body)
	}
	list, err := n.Processes(context.Background())
	if err != nil || len(list) != 0 {
		t.Fatalf("something started: %+v %v", list, err)
	}
}

// One writer, any number of watchers, all seeing the same bytes.
func TestTerminalWritersAndWatchers(t *testing.T) {
	d := newDaemon(t, api.Options{TermLocks: t.TempDir()})
	n := d.create(t, "ww")
	ctx := context.Background()
	w1, err := n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Argv: []string{"sh"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	if _, err := n.Terminal(ctx, cortex.TerminalOptions{PID: w1.PID}); !errors.As(err, &cortex.OwnedElsewhereError{}) || !strings.Contains(err.Error(), "already has a writer") {
		t.Fatalf("a second writer: %v", err)
	}
	watchers := make([]*cortex.Terminal, 2)
	for i := range watchers {
		if watchers[i], err = n.Terminal(ctx, cortex.TerminalOptions{PID: w1.PID, Watch: true}); err != nil {
			t.Fatal(err)
		}
		defer watchers[i].Close()
	}
	watchers[0].Write([]byte("echo ignored-from-watcher\n"))
	w1.Write([]byte("echo from-$((1+1))-writer; exit 3\n"))
	for i, term := range append(watchers, w1) {
		b, _ := io.ReadAll(term)
		if !strings.Contains(string(b), "from-2-writer") || strings.Contains(string(b), "ignored-from-watcher") {
			t.Fatalf("attachment %d saw %q", i, b)
		}
		if code, _, err := term.Wait(); err != nil || code != 3 {
			t.Fatalf("attachment %d: exit %d %v", i, code, err)
		}
	}
}

// A writer that closes its attachment has let the terminal go when
// Close returns: attaching again at once is never refused as the
// writer's own (a race the close handshake lost before the server let
// go of the lock).
func TestTerminalReattachAfterClose(t *testing.T) {
	d := newDaemon(t, api.Options{TermLocks: t.TempDir()})
	n := d.create(t, "ra")
	ctx := context.Background()
	term, err := n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Argv: []string{"sh"}}})
	if err != nil {
		t.Fatal(err)
	}
	pid := term.PID
	for i := range 40 {
		if err := term.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		if term, err = n.Terminal(ctx, cortex.TerminalOptions{PID: pid}); err != nil {
			t.Fatalf("attach %d right after the last one closed: %v", i, err)
		}
	}
	if _, err := term.Write([]byte("exit 4\n")); err != nil {
		t.Fatal(err)
	}
	term.Discard()
	if code, _, err := term.Wait(); err != nil || code != 4 {
		t.Fatalf("exit: %d %v", code, err)
	}
	term.Close()
}

// Offset after Close counts only output this attachment delivered:
// attaching again from it repeats nothing and skips nothing, though
// Close drops what arrives while it waits for the daemon to let go.
func TestTerminalOffsetAfterClose(t *testing.T) {
	d := newDaemon(t, api.Options{TermLocks: t.TempDir()})
	n := d.create(t, "off")
	ctx := context.Background()
	term, err := n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Shell: "i=0; while [ $i -lt 300000 ]; do echo L$i; i=$((i+1)); done; sleep 100"}})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for got.Len() < 20000 {
		k, err := term.Read(buf)
		got.Write(buf[:k])
		if err != nil {
			t.Fatal(err)
		}
	}
	term.Close()
	for { // what was queued before the Close
		k, err := term.Read(buf)
		got.Write(buf[:k])
		if err != nil {
			break
		}
	}
	if off := term.Offset(); off != int64(got.Len()) {
		t.Fatalf("Offset() is %d, but %d bytes were delivered", off, got.Len())
	}
	again, err := n.Terminal(ctx, cortex.TerminalOptions{PID: term.PID, Offset: term.Offset()})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var more bytes.Buffer
	for !bytes.Contains(more.Bytes(), []byte("\n")) {
		k, err := again.Read(buf)
		more.Write(buf[:k])
		if err != nil {
			t.Fatal(err)
		}
	}
	// The line cut at the end of what was delivered goes on where it was.
	lines := strings.Split(got.String(), "\n")
	cut := lines[len(lines)-1] + strings.SplitN(more.String(), "\n", 2)[0]
	last := strings.TrimSpace(lines[len(lines)-2])
	var a, b int
	if _, err := fmt.Sscanf(last, "L%d", &a); err != nil {
		t.Fatalf("the last whole line delivered: %q", last)
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(cut), "L%d", &b); err != nil || b != a+1 {
		t.Fatalf("after L%d the attachment from Offset() goes on with %q", a, cut)
	}
	again.Kill()
}

func TestReviewRegressions(t *testing.T) {
	d := newDaemon(t, api.Options{Token: "tok"})
	n := d.create(t, "rr")
	ctx := context.Background()
	// The auth scheme is case-insensitive.
	if status, _ := raw(t, d, "GET", "/v1/neurons", "", "Authorization", "bearer tok"); status != 200 {
		t.Fatalf("lower-case bearer: %d", status)
	}
	auth := []string{"Authorization", "Bearer tok"}
	if status, body := raw(t, d, "POST", "/v1/neurons/rr/exec", `{"shell":"true"}}`, auth...); status != 400 || !strings.Contains(body, "after its JSON") {
		t.Fatalf("trailing data: %d %s", status, body)
	}
	// Ranges: past the end is 416; several are ignored.
	n.WriteFile(ctx, "ten", strings.NewReader("0123456789"), nil)
	if status, body := raw(t, d, "GET", "/v1/neurons/rr/files?path=ten", "", append(auth, "Range", "bytes=10-")...); status != 416 || !strings.Contains(body, "RANGE_NOT_SATISFIABLE") {
		t.Fatalf("past the end: %d %s", status, body)
	}
	if status, body := raw(t, d, "GET", "/v1/neurons/rr/files?path=ten", "", append(auth, "Range", "bytes=0-1,3-4")...); status != 200 || body != "0123456789" {
		t.Fatalf("several ranges: %d %s", status, body)
	}
	// A FIFO is not downloaded (its open would block).
	if res, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "mkfifo ff"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if status, body := raw(t, d, "GET", "/v1/neurons/rr/files?path=ff", "", auth...); status != 400 || !strings.Contains(body, "not a regular file") {
		t.Fatalf("a FIFO: %d %s", status, body)
	}
	// An upload cut short leaves the file as it was.
	n.WriteFile(ctx, "keep", strings.NewReader("original"), nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT /v1/neurons/rr/files?path=keep HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("x", 5000))
	conn.(*net.TCPConn).CloseWrite()
	io.ReadAll(conn)
	conn.Close()
	// The daemon is done with the cut upload, and the agent with its
	// temporary file.
	waitIdle(t, d, auth...)
	waittest.For(t, 30*time.Second, "the cut upload's temporary file to go", func() bool {
		list, err := n.List(ctx, ".")
		if err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(list, func(f cortex.FileInfo) bool { return strings.Contains(f.Name, ".cortex-") })
	})
	if b, err := n.ReadFile(ctx, "keep"); err != nil || string(b) != "original" {
		t.Fatalf("after a cut upload: %q %v", b, err)
	}
}

// The SDK's Stream may be closed from another goroutine while Next waits.
func TestStreamCloseWhileNextWaits(t *testing.T) {
	d := newDaemon(t, api.Options{})
	n := d.create(t, "sc")
	ctx := context.Background()
	p, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Argv: []string{"sleep", "30"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := n.Output(ctx, p.PID, cortex.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		waittest.Until(30*time.Second, func() bool { return waittest.Parked("client.(*Stream).Next") })
		s.Close()
	}()
	if _, err := s.Next(); err == nil {
		t.Fatal("Next returned an event after Close")
	}
}
