package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/process"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/process/processconnect"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// e2bDaemon is a daemon answering E2B's API, with an E2B key per tenant.
func e2bDaemon(t *testing.T) (*daemon, map[string]string) {
	t.Helper()
	lay, err := layout.New(filepath.Join(t.TempDir(), "keys"), "")
	if err != nil {
		t.Fatal(err)
	}
	keys := apikey.Open(lay)
	tokens := map[string]string{}
	for _, team := range []string{"a", "b"} {
		tok, _, err := keys.Create(apikey.Key{Name: "team-" + team, Scopes: []gate.Scope{gate.ScopeAdmin}, Selector: labels.Set{"team": team}, E2B: true})
		if err != nil {
			t.Fatal(err)
		}
		tokens[team] = tok
	}
	d := newDaemon(t, api.Options{Token: adminToken, Keys: keys, E2B: true, URLKey: []byte(strings.Repeat("k", 32))})
	return d, tokens
}

// refused sends a request and wants status want in E2B's error shape.
func refused(t *testing.T, d *daemon, want int, method, path, body string, hdr ...string) {
	t.Helper()
	status, got := raw(t, d, method, path, body, hdr...)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if status != want || json.Unmarshal([]byte(got), &e) != nil || e.Code != want || e.Message == "" {
		t.Fatalf("%s %s: got %d %s, want %d in E2B's error shape", method, path, status, got, want)
	}
}

// envdClient is the official Connect protocol's client of a sandbox's
// process service, sending the headers E2B's SDKs send.
func envdClient(d *daemon, id, token string) processconnect.ProcessClient {
	hc := &http.Client{Transport: headerTransport{"E2b-Sandbox-Id": id, "X-Access-Token": token}}
	return processconnect.NewProcessClient(hc, d.ts.URL+api.E2BSandboxPrefix)
}

type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// run starts argv through envd and returns its stdout and exit code.
func envdRun(t *testing.T, c processconnect.ProcessClient, argv ...string) (string, int32, error) {
	t.Helper()
	st, err := c.Start(context.Background(), connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: argv[0], Args: argv[1:]}}))
	if err != nil {
		return "", 0, err
	}
	defer st.Close()
	var out strings.Builder
	for st.Receive() {
		switch ev := st.Msg().GetEvent().GetEvent().(type) {
		case *process.ProcessEvent_Data:
			out.Write(ev.Data.GetStdout())
		case *process.ProcessEvent_End:
			return out.String(), ev.End.GetExitCode(), nil
		}
	}
	return out.String(), 0, st.Err()
}

// The E2B API's boundaries: a key is needed and checked, a tenant's
// sandbox is another tenant's 404, a sandbox's envd token opens that
// sandbox and no other, and bad envelopes change nothing. Each refusal
// is in E2B's shape, so the SDKs raise their own typed errors.
func TestE2BBoundaries(t *testing.T) {
	d, key := e2bDaemon(t)
	status, body := raw(t, d, "POST", "/e2b/v2/sandboxes", `{"templateID":"base","metadata":{"team":"a","app":"x"},"envVars":{"FOO":"bar"}}`, "X-API-Key", key["a"])
	var sb struct {
		SandboxID       string            `json:"sandboxID"`
		EnvdVersion     string            `json:"envdVersion"`
		EnvdAccessToken string            `json:"envdAccessToken"`
		Metadata        map[string]string `json:"metadata"`
	}
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &sb) != nil || sb.SandboxID == "" || sb.EnvdAccessToken == "" || sb.Metadata["app"] != "x" {
		t.Fatalf("create: %d %s", status, body)
	}
	id := sb.SandboxID

	// Keys.
	refused(t, d, http.StatusUnauthorized, "GET", "/e2b/v2/sandboxes", "")
	refused(t, d, http.StatusUnauthorized, "GET", "/e2b/v2/sandboxes", "", "X-API-Key", apikey.E2BPrefix+strings.Repeat("0", 64))
	// A bearer token is the native API's, not E2B's.
	refused(t, d, http.StatusUnauthorized, "GET", "/e2b/v2/sandboxes", "", "Authorization", "Bearer "+adminToken)

	// Tenants: b sees none of a's, by any route.
	for _, r := range [][2]string{{"GET", "/e2b/sandboxes/" + id}, {"DELETE", "/e2b/sandboxes/" + id}, {"POST", "/e2b/sandboxes/" + id + "/pause"}, {"POST", "/e2b/v2/sandboxes/" + id + "/connect"}} {
		refused(t, d, http.StatusNotFound, r[0], r[1], "{}", "X-API-Key", key["b"])
	}
	if s, b := raw(t, d, "GET", "/e2b/v2/sandboxes", "", "X-API-Key", key["b"]); s != http.StatusOK || strings.Contains(b, id) {
		t.Fatalf("b's list: %d %s", s, b)
	}
	if s, b := raw(t, d, "GET", "/e2b/v2/sandboxes?metadata="+strings.ReplaceAll("app=x", "=", "%3D"), "", "X-API-Key", key["a"]); s != http.StatusOK || !strings.Contains(b, id) {
		t.Fatalf("a's list by metadata: %d %s", s, b)
	}
	refused(t, d, http.StatusNotFound, "GET", "/e2b/sandboxes/nosuchbox", "", "X-API-Key", key["a"])
	refused(t, d, http.StatusNotFound, "POST", "/e2b/v2/sandboxes", `{"templateID":"python"}`, "X-API-Key", key["a"])

	// envd: the token runs commands in its own sandbox.
	good := envdClient(d, id, sb.EnvdAccessToken)
	out, code, err := envdRun(t, good, "sh", "-c", "echo $FOO")
	if err != nil || code != 0 || out != "bar\n" {
		t.Fatalf("a command through envd: %q %d %v", out, code, err)
	}
	// Another sandbox (b's), with a's token: refused before anything runs.
	status, body = raw(t, d, "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"b"}}`, "X-API-Key", key["b"])
	var other struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &other) != nil {
		t.Fatalf("b's create: %d %s", status, body)
	}
	for name, c := range map[string]processconnect.ProcessClient{
		"a's token for b's sandbox": envdClient(d, other.SandboxID, sb.EnvdAccessToken),
		"no token":                  envdClient(d, id, ""),
		"a token of another form":   envdClient(d, id, strings.ToUpper(sb.EnvdAccessToken)),
	} {
		if _, _, err := envdRun(t, c, "touch", "/tmp/ran"); err == nil || connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
	if _, err := good.List(context.Background(), connect.NewRequest(&process.ListRequest{})); err != nil {
		t.Fatal(err)
	}

	// A malformed envelope and a message over the cap: Connect's errors,
	// and nothing started.
	hdr := []string{"E2b-Sandbox-Id", id, "X-Access-Token", sb.EnvdAccessToken, "Content-Type", "application/json"}
	s, b := raw(t, d, "POST", "/e2b/sandbox/process.Process/SendInput", `{"process":{"pid":`, hdr...)
	if s < 400 || !strings.Contains(b, `"code"`) {
		t.Fatalf("a malformed message: %d %s", s, b)
	}
	big := `{"process":{"pid":1},"input":{"stdin":"` + strings.Repeat("A", 6<<20) + `"}}`
	s, b = raw(t, d, "POST", "/e2b/sandbox/process.Process/SendInput", big, hdr...)
	if s < 400 || !strings.Contains(b, "resource_exhausted") {
		t.Fatalf("a message over the cap: %d %.200s", s, b)
	}
	list, err := good.List(context.Background(), connect.NewRequest(&process.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 0 {
		t.Fatalf("processes after bad envelopes: %v %v", list, err)
	}

	// Kill: the sandbox is gone, its token opens nothing.
	if s, b := raw(t, d, "DELETE", "/e2b/sandboxes/"+id, "", "X-API-Key", key["a"]); s != http.StatusNoContent {
		t.Fatalf("kill: %d %s", s, b)
	}
	if _, _, err := envdRun(t, good, "true"); err == nil {
		t.Fatal("a command in a killed sandbox ran")
	} else if ce := new(connect.Error); !errors.As(err, &ce) {
		t.Fatalf("not a Connect error: %v", err)
	}
	// A neuron made later under the same id (ids may be chosen on the
	// native API) is not opened by the killed sandbox's token.
	if s, b := raw(t, d, "POST", "/v1/neurons", `{"id":"`+id+`","labels":{"team":"b"}}`, "Authorization", "Bearer "+adminToken); s != http.StatusCreated {
		t.Fatalf("a neuron of the same id: %d %s", s, b)
	}
	if _, _, err := envdRun(t, good, "touch", "/tmp/ran"); err == nil || connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("the killed sandbox's token on a new neuron of its id: %v", err)
	}
}
