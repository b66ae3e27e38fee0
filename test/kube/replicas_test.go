package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// replica is one `nsys-cortex serve` in kube mode, as deploy/kubernetes
// runs it: its own home, the shared API token and signing key.
type replica struct {
	t    *testing.T
	bin  string
	env  []string
	addr string
	args []string // serve's flags beyond --listen
	cmd  *exec.Cmd
	done chan error
	out  []*strings.Builder // each start's output, read once it has ended
	up   bool
}

func (r *replica) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, append([]string{"serve", "--listen", r.addr}, r.args...)...)
	r.cmd.Env = r.env
	out := &strings.Builder{}
	r.out = append(r.out, out)
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.up, r.done = true, make(chan error, 1)
	go func(c *exec.Cmd) { r.done <- c.Wait() }(r.cmd)
	waittest.For(r.t, 30*time.Second, "serve on "+r.addr+" healthy", func() bool {
		res, err := http.Get("http://" + r.addr + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == http.StatusOK
	})
}

func (r *replica) stop() {
	r.t.Helper()
	r.up = false
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
		r.t.Fatalf("serve on %s did not stop within 30 s of SIGTERM", r.addr)
	}
}

// serveEnv is the environment of a `serve` in kube mode on the cluster rc
// reaches, with API token token: every replica started with it shares
// the signing key (made by the first).
func serveEnv(t *testing.T, rc *rest.Config, cfg kube.Config, token string) []string {
	kc, keyDir := writeKubeconfig(t, rc), t.TempDir()
	return []string{"PATH=" + os.Getenv("PATH"), "NSYS_CORTEX_MODE=kube", "NSYS_CORTEX_KUBE_IMAGE=" + cfg.Image,
		"NSYS_CORTEX_KUBE_NAMESPACE=" + cfg.Namespace, "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true", // kubesim's pods are on loopback
		"NSYS_CORTEX_KUBE_KUBECONFIG=" + kc, "NSYS_CORTEX_KUBE_SIGNING_KEY=" + filepath.Join(keyDir, "signing.key"),
		"NSYS_CORTEX_KUBE_API_KEYS=nsys-cortex-api-keys", "NSYS_CORTEX_API_TOKEN=" + token}
}

// newReplica starts `serve` (binary bin, with flags args) with base and
// a home of its own, on a free loopback port; it is stopped at the
// test's end, and what it said is logged if the test failed.
func newReplica(t *testing.T, bin string, base []string, args ...string) *replica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	env := append(append([]string{}, base...), "HOME="+t.TempDir(), "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h"))
	r := &replica{t: t, bin: bin, env: env, addr: addr, args: args}
	r.start()
	t.Cleanup(func() {
		if r.up {
			r.stop()
		}
		if t.Failed() {
			for _, out := range r.out {
				t.Logf("serve on %s said:\n%s", r.addr, out)
			}
		}
	})
	return r
}

// Two serve replicas, as behind one Service, with nothing in common but
// the cluster, the API token and the signing key: a neuron created
// through one is listed and driven through the other, and a replica
// restarted (a new process; its home kept or not) drives it on.
func TestReplicas(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.Start(t, core, cluster.Agents(rc), cfg) })
	bin := buildCLI(t)
	const token = "0123456789abcdef0123456789abcdef"
	base := append(serveEnv(t, rc, cfg, token), "NSYS_CORTEX_KUBE_CHAT_SESSIONS=true",
		"OPENAI_API_KEY=test-key", "NSYS_CORTEX_PROVIDER=openai", "NSYS_CORTEX_MODEL=fake", "NSYS_CORTEX_LLM_BASE_URL="+echoModel(t))
	replicas := []*replica{newReplica(t, bin, base), newReplica(t, bin, base)} // the first makes the signing key, the second reads it
	// The CLI as a client of replica i, with bearer token tok.
	as := func(tok string, i int, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NSYS_CORTEX_HOME=" + filepath.Join(t.TempDir(), "c"),
			"NSYS_CORTEX_API_URL=http://" + replicas[i].addr, "NSYS_CORTEX_API_TOKEN=" + tok}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	via := func(i int, args ...string) string {
		t.Helper()
		out, err := as(token, i, args...)
		if err != nil {
			t.Fatalf("nsys-cortex %s through replica %d: %v\n%s", strings.Join(args, " "), i, err, out)
		}
		return out
	}
	// The CLI run inside replica i's pod (kubectl exec): its home, its
	// settings; what it writes to stdout.
	in := func(i int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = replicas[i].env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("nsys-cortex %s in replica %d: %v\n%s%s", strings.Join(args, " "), i, err, out, stderr.String())
		}
		return string(out)
	}
	via(0, "create", "--mode", "kube", "shared")
	via(0, "exec", "shared", "--", "sh", "-c", "echo from-0 > f")
	if out := via(1, "list"); !strings.Contains(out, "shared") || !strings.Contains(out, "running") {
		t.Fatalf("the other replica's list:\n%s", out)
	}
	if out := via(1, "exec", "shared", "--", "cat", "f"); out != "from-0\n" {
		t.Fatalf("exec through the other replica: %q", out)
	}
	// Replica 0 goes and comes back: nothing of the neuron was its own.
	replicas[0].stop()
	if out := via(1, "exec", "shared", "--", "sh", "-c", "echo from-1 >> f; cat f"); out != "from-0\nfrom-1\n" {
		t.Fatalf("exec with replica 0 gone: %q", out)
	}
	replicas[0].start()
	if out := via(0, "exec", "shared", "--", "cat", "f"); out != "from-0\nfrom-1\n" {
		t.Fatalf("exec through replica 0 restarted: %q", out)
	}
	via(1, "destroy", "--wipe", "shared")
	if out := via(0, "list"); strings.Contains(out, "shared") {
		t.Fatalf("list after a wipe through the other replica:\n%s", out)
	}

	// API keys are the cluster's too (kube.api_keys): a key made in one
	// replica works through the other, and through a replica started
	// again with a new home (a pod replaced: its emptyDir gone), which
	// also sees when it was last used; one
	// removed through either is refused by both within a few seconds.
	lines := strings.Split(strings.TrimSpace(in(0, "token", "create", "--scope", "admin", "team")), "\n")
	key := lines[len(lines)-1]
	if out, err := as(key, 1, "list"); err != nil {
		t.Fatalf("the key made in replica 0, through replica 1: %v\n%s", err, out)
	}
	replicas[0].stop()
	replicas[0].env = append(replicas[0].env, "HOME="+t.TempDir(), "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h2"))
	replicas[0].start()
	if out, err := as(key, 0, "list"); err != nil {
		t.Fatalf("the key through replica 0 with a new home: %v\n%s", err, out)
	}
	if out := in(0, "token", "list"); !strings.Contains(out, "team") {
		t.Errorf("token list in replica 0 with a new home:\n%s", out)
	}
	// When it was last used is the cluster's too: its use through
	// replica 1 shows in a list in replica 0, whose home is new.
	waittest.For(t, 15*time.Second, "the key's use through replica 1 to show in replica 0", func() bool {
		out := in(0, "token", "list")
		return strings.Contains(out, "team") && !strings.Contains(out, "never")
	})
	in(1, "token", "rm", "team")
	for i := range replicas {
		waittest.For(t, 10*time.Second, fmt.Sprintf("replica %d to refuse the removed key", i), func() bool {
			out, err := as(key, i, "list")
			return err != nil && strings.Contains(out, "bearer token is wrong")
		})
	}

	// Chat sessions are the cluster's too (kube.chat_sessions): one made
	// and run through replica 0 is read and run on through replica 1,
	// and through replica 1 started again with a new home; one removed
	// through either is gone through both.
	client := func(i int) *cortex.Client {
		c, err := cortex.New("http://"+replicas[i].addr, cortex.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	said := func(i int, id string) string {
		t.Helper()
		d, err := client(i).Session(ctx, id)
		if err != nil {
			t.Fatalf("session %s through replica %d: %v", id, i, err)
		}
		var out []string
		for _, m := range d.Messages {
			out = append(out, m.Text)
		}
		return strings.Join(out, "|")
	}
	s, err := client(0).CreateSession(ctx, &cortex.SessionCreate{Neuron: "chatting", Title: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(0).Send(ctx, s.ID, "one", nil); err != nil {
		t.Fatal(err)
	}
	if got := said(1, s.ID); got != "one|echo: one" {
		t.Fatalf("through replica 1: %q", got)
	}
	replicas[1].stop()
	replicas[1].env = append(replicas[1].env, "HOME="+t.TempDir(), "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h2"))
	replicas[1].start()
	if l, err := client(1).Sessions(ctx); err != nil || len(l) != 1 || l[0].ID != s.ID || l[0].Title != "shared" {
		t.Fatalf("listed through replica 1 with a new home: %+v %v", l, err)
	}
	if _, err := client(1).Send(ctx, s.ID, "two", nil); err != nil {
		t.Fatal(err)
	}
	if got := said(0, s.ID); got != "one|echo: one|two|echo: two" {
		t.Fatalf("back through replica 0: %q", got)
	}
	if err := client(1).CloseSession(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	var ae cortex.APIError
	if _, err := client(0).Session(ctx, s.ID); !errors.As(err, &ae) || ae.Code != cortex.CodeNotFound {
		t.Fatalf("a session removed through replica 1, through replica 0: %v", err)
	}
	via(0, "destroy", "--wipe", "chatting")
}

// echoModel answers every chat request, in the OpenAI wire format,
// "echo: " and the last message.
func echoModel(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []struct {
				Content any `json:"content"`
			} `json:"messages"`
		}
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&body) != nil || len(body.Messages) == 0 {
			http.Error(w, `{"error":{"message":"not a chat request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		var last string
		switch c := body.Messages[len(body.Messages)-1].Content.(type) {
		case string:
			last = c
		case []any: // parts
			for _, p := range c {
				if m, ok := p.(map[string]any); ok && m["type"] == "text" {
					last += fmt.Sprint(m["text"])
				}
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []map[string]any{
			{"index": 0, "delta": map[string]any{"role": "assistant", "content": "echo: " + last}, "finish_reason": nil},
			{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"},
		} {
			b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake", "choices": []any{c}})
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}
