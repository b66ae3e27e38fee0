package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/filesystem"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/filesystem/filesystemconnect"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/process"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/process/processconnect"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// e2bDaemon is a daemon answering E2B's API, with an E2B key per tenant.
func e2bDaemon(t *testing.T) (*daemon, map[string]string, *apikey.Store) {
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
	return d, tokens, keys
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
	d, key, _ := e2bDaemon(t)
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

// e2bSandboxOf creates or connects (as key) and reads the answer.
func e2bSandboxOf(t *testing.T, d *daemon, key, method, path, body string) (id, envdToken string) {
	t.Helper()
	status, got := raw(t, d, method, path, body, "X-API-Key", key)
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if status >= 300 || json.Unmarshal([]byte(got), &sb) != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("%s %s: %d %s", method, path, status, got)
	}
	return sb.SandboxID, sb.EnvdAccessToken
}

// e2bSign is a file URL's signature as E2B's SDKs make it.
func e2bSign(path, op, user, token, expiration string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// An envd token is worth what the key that got it may do, now: a key
// that may only read gets a token that may only read; a key without the
// terminals scope opens no PTY; a removed (or remade) key's tokens are
// void; the key's rate counts envd's requests too. Signed file URLs are
// checked the same way, and expire.
func TestE2BTokensAreTheKeys(t *testing.T) {
	d, key, keys := e2bDaemon(t)
	mk := func(name string, rate float64, scopes ...gate.Scope) string {
		tok, _, err := keys.Create(apikey.Key{Name: name, Scopes: scopes, Selector: labels.Set{"team": "a"}, E2B: true, Rate: rate})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ro, execOnly, slow := mk("reader", 0, gate.ScopeRead), mk("runner", 0, gate.ScopeExec), mk("slow", 1, gate.ScopeAdmin)
	id, adminTok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"}}`)
	if _, _, err := envdRun(t, envdClient(d, id, adminTok), "sh", "-c", "echo hi > f && mkfifo fifo"); err != nil {
		t.Fatal(err)
	}

	// The reader's connect gives a token that reads, and does nothing more.
	_, roTok := e2bSandboxOf(t, d, ro, "POST", "/e2b/v2/sandboxes/"+id+"/connect", `{}`)
	if _, err := envdClient(d, id, roTok).List(context.Background(), connect.NewRequest(&process.ListRequest{})); err == nil {
		t.Error("a read-only key's envd token listed processes (exec's scope)")
	}
	if _, _, err := envdRun(t, envdClient(d, id, roTok), "touch", "/tmp/by-reader"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a read-only key's envd token ran a command: %v", err)
	}
	hdr := func(tok string) []string { return []string{"E2b-Sandbox-Id", id, "X-Access-Token", tok} }
	refused(t, d, http.StatusForbidden, "GET", "/e2b/sandbox/files?path=f", "", hdr(roTok)...)
	if s, b := raw(t, d, "GET", "/e2b/sandbox/health", "", hdr(roTok)...); s != http.StatusNoContent {
		t.Errorf("health with the reader's token: %d %s", s, b)
	}

	// The runner runs commands, but opens no terminal.
	_, runTok := e2bSandboxOf(t, d, execOnly, "POST", "/e2b/v2/sandboxes/"+id+"/connect", `{}`)
	if out, _, err := envdRun(t, envdClient(d, id, runTok), "echo", "ran"); err != nil || out != "ran\n" {
		t.Fatalf("the runner's command: %q %v", out, err)
	}
	st, err := envdClient(d, id, runTok).Start(context.Background(), connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "sh"}, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		st.Close()
	}
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a PTY with a key without the terminals scope: %v", err)
	}

	// A signed URL: the SDK's signature over the token, with or without
	// an expiry; a wrong operation, a past expiry, another token: refused.
	get := func(q string) (int, string) {
		return raw(t, d, "GET", "/e2b/sandbox/files?"+q, "", "E2b-Sandbox-Id", id)
	}
	future := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	if s, b := get("path=f&signature=" + url.QueryEscape(e2bSign("f", "read", "", adminTok, ""))); s != http.StatusOK || b != "hi\n" {
		t.Errorf("a signed download: %d %q", s, b)
	}
	if s, b := get("path=f&username=user&signature_expiration=" + future + "&signature=" + url.QueryEscape(e2bSign("f", "read", "user", adminTok, future))); s != http.StatusOK || b != "hi\n" {
		t.Errorf("a signed download with an expiry: %d %q", s, b)
	}
	for name, q := range map[string]string{
		"expired":             "path=f&signature_expiration=" + past + "&signature=" + url.QueryEscape(e2bSign("f", "read", "", adminTok, past)),
		"signed for writing":  "path=f&signature=" + url.QueryEscape(e2bSign("f", "write", "", adminTok, "")),
		"another path":        "path=/etc/passwd&signature=" + url.QueryEscape(e2bSign("f", "read", "", adminTok, "")),
		"the reader's token":  "path=f&signature=" + url.QueryEscape(e2bSign("f", "read", "", roTok, "")),
		"an unsigned request": "path=f&signature=v1_",
	} {
		s, b := get(q)
		// The reader's token is not even tried: a key that may not touch
		// files signs no file URL.
		if s != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, s, b)
		}
	}
	// A FIFO is not read (it could hold the request forever).
	refused(t, d, http.StatusBadRequest, "GET", "/e2b/sandbox/files?path=fifo", "", hdr(adminTok)...)

	// A key's rate counts its envd requests.
	_, slowTok := e2bSandboxOf(t, d, slow, "POST", "/e2b/v2/sandboxes/"+id+"/connect", `{}`)
	limited := false
	for range 40 {
		if s, _ := raw(t, d, "GET", "/e2b/sandbox/health", "", hdr(slowTok)...); s == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Error("a key of 1 request a second sent 40 envd requests unlimited")
	}

	// The reader is removed: its token is void at once. Made again under
	// its name, it is another key, and the old token is still void.
	if err := keys.Remove("reader"); err != nil {
		t.Fatal(err)
	}
	refused(t, d, http.StatusUnauthorized, "GET", "/e2b/sandbox/health", "", hdr(roTok)...)
	mk("reader", 0, gate.ScopeAdmin)
	refused(t, d, http.StatusUnauthorized, "GET", "/e2b/sandbox/health", "", hdr(roTok)...)
}

// Bad input on the control plane: E2B's shape, nothing changed.
func TestE2BBadInput(t *testing.T) {
	d, key, _ := e2bDaemon(t)
	for _, c := range []struct {
		status       int
		method, path string
		body         string
	}{
		{http.StatusBadRequest, "POST", "/e2b/v2/sandboxes", `{"timeout":9223372036854775807}`},
		{http.StatusBadRequest, "POST", "/e2b/v2/sandboxes", `{"timeout":-1}`},
		{http.StatusBadRequest, "POST", "/e2b/v2/sandboxes", `{"network":{"allowOut":["1.1.1.1"]}}`},
		{http.StatusBadRequest, "POST", "/e2b/v2/sandboxes", `{"metadata":{"e2b.nsys-cortex/traffic":"public"}}`},
		{http.StatusNotFound, "GET", "/e2b/sandboxes/%2e%2e", ""},
		{http.StatusNotFound, "DELETE", "/e2b/sandboxes/..%2fv1", ""},
		{http.StatusNotFound, "GET", "/e2b/sandboxes/a%2Fb/metrics", ""},
	} {
		refused(t, d, c.status, c.method, c.path, c.body, "X-API-Key", key["a"])
	}
	if s, b := raw(t, d, "GET", "/v1/neurons", "", "Authorization", "Bearer "+adminToken); s != http.StatusOK || strings.Contains(b, `"id"`) {
		t.Fatalf("neurons after bad input: %d %s", s, b)
	}
}

// Host routing, E2B's rule: a port of a sandbox made through E2B's API
// is reached at <port>-<id>.<domain> by anyone when it is public, with
// its traffic access token when it is private; a native neuron's port
// keeps the native rule; 49983-<id>.<domain> is the sandbox's envd.
func TestE2BHostRouting(t *testing.T) {
	lay, err := layout.New(filepath.Join(t.TempDir(), "keys"), "")
	if err != nil {
		t.Fatal(err)
	}
	keys := apikey.Open(lay)
	tok, _, err := keys.Create(apikey.Key{Name: "team-a", Scopes: []gate.Scope{gate.ScopeAdmin}, E2B: true})
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, api.Options{Token: adminToken, Keys: keys, E2B: true, URLKey: []byte(strings.Repeat("k", 32)), Domain: "cortex.test"})
	create := func(body string) (id, envdTok, trafficTok string) {
		status, got := raw(t, d, "POST", "/e2b/v2/sandboxes", body, "X-API-Key", tok)
		var sb struct {
			SandboxID          string `json:"sandboxID"`
			EnvdAccessToken    string `json:"envdAccessToken"`
			TrafficAccessToken string `json:"trafficAccessToken"`
			Domain             string `json:"domain"`
		}
		if status != http.StatusCreated || json.Unmarshal([]byte(got), &sb) != nil || sb.Domain != "cortex.test" {
			t.Fatalf("create %s: %d %s", body, status, got)
		}
		return sb.SandboxID, sb.EnvdAccessToken, sb.TrafficAccessToken
	}
	serve := func(id string) int { return startPortServer(t, d, id) }
	pub, pubEnvd, pubTraffic := create(`{}`)
	if pubTraffic != "" {
		t.Fatalf("a public sandbox got a traffic token")
	}
	priv, _, privTraffic := create(`{"network":{"allowPublicTraffic":false}}`)
	if privTraffic == "" {
		t.Fatal("a private sandbox got no traffic token")
	}
	pubPort, privPort := serve(pub), serve(priv)
	host := func(port int, id string) string { return fmt.Sprintf("%d-%s.cortex.test", port, id) }

	if code, body, _ := get(t, d, "/hi", map[string]string{"Host": host(pubPort, pub)}); code != 200 || !strings.HasPrefix(body, "hello from the neuron: GET /hi") {
		t.Errorf("a public sandbox's port: %d %q", code, body)
	}
	if code, _, _ := get(t, d, "/hi", map[string]string{"Host": host(privPort, priv)}); code != http.StatusUnauthorized {
		t.Errorf("a private sandbox's port without its traffic token: %d", code)
	}
	if code, _, _ := get(t, d, "/hi", map[string]string{"Host": host(privPort, priv), "E2b-Traffic-Access-Token": pubEnvd}); code != http.StatusUnauthorized {
		t.Errorf("a private sandbox's port with another token: %d", code)
	}
	if code, body, _ := get(t, d, "/hi", map[string]string{"Host": host(privPort, priv), "E2b-Traffic-Access-Token": privTraffic}); code != 200 || !strings.HasPrefix(body, "hello from the neuron") {
		t.Errorf("a private sandbox's port with its traffic token: %d %q", code, body)
	}
	// A native neuron's port: the native rule (the API's token).
	d.create(t, "web")
	if code, _, _ := get(t, d, "/", map[string]string{"Host": host(serve("web"), "web")}); code != http.StatusUnauthorized {
		t.Errorf("a native neuron's port without the token: %d", code)
	}
	// envd by its host.
	if code, body, _ := get(t, d, "/health", map[string]string{"Host": host(49983, pub), "X-Access-Token": pubEnvd}); code != http.StatusNoContent {
		t.Errorf("envd's health at its host: %d %s", code, body)
	}
	if code, _, _ := get(t, d, "/health", map[string]string{"Host": host(49983, priv), "X-Access-Token": pubEnvd}); code != http.StatusUnauthorized {
		t.Errorf("envd of another sandbox with this one's token: %d", code)
	}
}

// Refreshes, logs, /envs and fork, as E2B's REST spec and envd answer
// them.
func TestE2BMoreRoutes(t *testing.T) {
	d, key, _ := e2bDaemon(t)
	id, tok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"},"envVars":{"FOO":"bar"},"timeout":30}`)
	sbx := func(k string) (int, e2bInfo) {
		status, got := raw(t, d, "GET", "/e2b/sandboxes/"+id, "", "X-API-Key", k)
		var info e2bInfo
		json.Unmarshal([]byte(got), &info)
		return status, info
	}
	_, before := sbx(key["a"])
	if s, b := raw(t, d, "POST", "/e2b/sandboxes/"+id+"/refreshes", `{"duration":600}`, "X-API-Key", key["a"]); s != http.StatusNoContent {
		t.Fatalf("refresh: %d %s", s, b)
	}
	if _, after := sbx(key["a"]); !after.EndAt.After(before.EndAt.Add(500 * time.Second)) {
		t.Errorf("refresh by 600 s: end %v, before %v", after.EndAt, before.EndAt)
	}
	refused(t, d, http.StatusNotFound, "POST", "/e2b/sandboxes/"+id+"/refreshes", `{"duration":60}`, "X-API-Key", key["b"])

	status, body := raw(t, d, "GET", "/e2b/sandboxes/"+id+"/logs", "", "X-API-Key", key["a"])
	var logs struct {
		Logs []struct {
			Line string `json:"line"`
		} `json:"logs"`
	}
	if status != 200 || json.Unmarshal([]byte(body), &logs) != nil || len(logs.Logs) == 0 || !strings.HasPrefix(logs.Logs[0].Line, "created") {
		t.Errorf("logs: %d %s", status, body)
	}
	refused(t, d, http.StatusNotFound, "GET", "/e2b/sandboxes/"+id+"/logs", "", "X-API-Key", key["b"])

	status, body = raw(t, d, "GET", "/e2b/sandbox/envs", "", "E2b-Sandbox-Id", id, "X-Access-Token", tok)
	var envs map[string]string
	if status != 200 || json.Unmarshal([]byte(body), &envs) != nil || envs["FOO"] != "bar" {
		t.Errorf("/envs: %d %.300s", status, body)
	}

	if _, _, err := envdRun(t, envdClient(d, id, tok), "sh", "-c", "echo forked > mark"); err != nil {
		t.Fatal(err)
	}
	refused(t, d, http.StatusNotFound, "POST", "/e2b/sandboxes/"+id+"/fork", `{"count":2}`, "X-API-Key", key["b"])
	status, body = raw(t, d, "POST", "/e2b/sandboxes/"+id+"/fork", `{"count":2,"timeout":60}`, "X-API-Key", key["a"])
	var forks []struct {
		Sandbox *struct {
			SandboxID       string            `json:"sandboxID"`
			EnvdAccessToken string            `json:"envdAccessToken"`
			Metadata        map[string]string `json:"metadata"`
		} `json:"sandbox"`
	}
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &forks) != nil || len(forks) != 2 {
		t.Fatalf("fork: %d %s", status, body)
	}
	for _, f := range forks {
		if f.Sandbox == nil || f.Sandbox.SandboxID == id || f.Sandbox.Metadata["team"] != "a" {
			t.Fatalf("a fork: %s", body)
		}
		out, _, err := envdRun(t, envdClient(d, f.Sandbox.SandboxID, f.Sandbox.EnvdAccessToken), "cat", "mark")
		if err != nil || out != "forked\n" {
			t.Errorf("the fork %s's data: %q %v", f.Sandbox.SandboxID, out, err)
		}
		if _, _, err := envdRun(t, envdClient(d, f.Sandbox.SandboxID, tok), "true"); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("the source's token on its fork: %v", err)
		}
	}
}

type e2bInfo struct {
	EndAt time.Time `json:"endAt"`
}

// envd over h2c (HTTP/2 without TLS) in both of Connect's codecs, as
// Serve answers it.
func TestE2BOverH2C(t *testing.T) {
	d, key, keys := e2bDaemon(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Options{Set: d.set, Token: adminToken, Keys: keys, E2B: true, URLKey: []byte(strings.Repeat("k", 32))})
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, 5*time.Second) }()
	defer func() { stop(); <-served }()
	id, tok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"}}`)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	var proto string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("E2b-Sandbox-Id", id)
		r.Header.Set("X-Access-Token", tok)
		resp, err := tr.RoundTrip(r)
		if err == nil {
			proto = resp.Proto
		}
		return resp, err
	})}
	for name, opts := range map[string][]connect.ClientOption{"binary": nil, "json": {connect.WithProtoJSON()}} {
		c := processconnect.NewProcessClient(hc, "http://"+ln.Addr().String()+api.E2BSandboxPrefix, opts...)
		out, code, err := envdRun(t, c, "echo", name)
		if err != nil || code != 0 || out != name+"\n" || proto != "HTTP/2.0" {
			t.Errorf("%s over h2c: %q %d %v (%s)", name, out, code, err, proto)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startPTY opens a terminal running sh through envd with tok, and returns
// its pid; the stream is read until the test ends.
func startPTY(t *testing.T, d *daemon, id, tok string) uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := envdClient(d, id, tok).Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "sh"}, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() {
		t.Fatalf("the PTY's start: %v", st.Err())
	}
	pid := st.Msg().GetEvent().GetStart().GetPid()
	go func() {
		for st.Receive() {
		}
	}()
	return pid
}

// The attacks an adversarial review of the E2B API found, each tried: a
// key's credential does not reach a neuron through the port proxy; a
// terminal is a terminal by what it is, not by how a request names its
// input; a signed upload writes its one file; a removed key's open
// input stream ends; a private sandbox's traffic token is the key's.
func TestE2BReviewedAttacks(t *testing.T) {
	d, key, keys := e2bDaemon(t)
	runTok, _, err := keys.Create(apikey.Key{Name: "runner", Scopes: []gate.Scope{gate.ScopeExec}, Selector: labels.Set{"team": "a"}, E2B: true})
	if err != nil {
		t.Fatal(err)
	}
	roKey, _, err := keys.Create(apikey.Key{Name: "reader", Scopes: []gate.Scope{gate.ScopeRead}, Selector: labels.Set{"team": "a"}, E2B: true})
	if err != nil {
		t.Fatal(err)
	}
	id, adminTok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"},"network":{"allowPublicTraffic":false}}`)
	_, runner := e2bSandboxOf(t, d, runTok, "POST", "/e2b/v2/sandboxes/"+id+"/connect", `{}`)

	// A terminal, opened by the admin; the runner (exec, no terminals)
	// may not type into it as "stdin", signal it, or read it natively.
	pid := startPTY(t, d, id, adminTok)
	rc := envdClient(d, id, runner)
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	if _, err := rc.SendInput(context.Background(), connect.NewRequest(&process.SendInputRequest{Process: sel,
		Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("touch pwned\n")}}})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("stdin into a PTY without the terminals scope: %v", err)
	}
	if _, err := rc.SendSignal(context.Background(), connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGKILL})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a signal to a PTY without the terminals scope: %v", err)
	}
	bearer := []string{"Authorization", "Bearer " + runTok, "Content-Type", "application/octet-stream"}
	if s, b := raw(t, d, "POST", fmt.Sprintf("/v1/neurons/%s/processes/%d/input", id, pid), "touch pwned\n", bearer...); s != http.StatusForbidden {
		t.Errorf("the native process input into a PTY without the terminals scope: %d %s", s, b)
	}
	if s, b := raw(t, d, "GET", fmt.Sprintf("/v1/neurons/%s/processes/%d/output?follow=false", id, pid), "", bearer[:2]...); s != http.StatusForbidden {
		t.Errorf("the native process output of a PTY without the terminals scope: %d %.200s", s, b)
	}
	if out, _, _ := envdRun(t, envdClient(d, id, adminTok), "sh", "-c", "test -e pwned && echo yes || echo no"); out != "no\n" {
		t.Errorf("the runner typed into the terminal: %q", out)
	}

	// A signed upload URL writes its one path, not a second part's.
	var body strings.Builder
	mw := multipart.NewWriter(&body)
	for _, name := range []string{"ignored", "evil.sh"} {
		fw, _ := mw.CreateFormFile("file", name)
		fw.Write([]byte("echo " + name))
	}
	mw.Close()
	q := "path=allowed.txt&signature=" + url.QueryEscape(e2bSign("allowed.txt", "write", "", adminTok, ""))
	if s, b := raw(t, d, "POST", "/e2b/sandbox/files?"+q, body.String(), "E2b-Sandbox-Id", id, "Content-Type", mw.FormDataContentType()); s != http.StatusBadRequest {
		t.Errorf("a signed upload of two parts: %d %s", s, b)
	}
	if out, _, _ := envdRun(t, envdClient(d, id, adminTok), "sh", "-c", "test -e evil.sh && echo yes || echo no"); out != "no\n" {
		t.Errorf("a signed upload wrote a path it was not signed for: %q", out)
	}

	// A removed key's open input stream ends.
	st := rc.StreamInput(context.Background())
	cat, err := rc.Start(context.Background(), connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "cat"}}))
	if err != nil || !cat.Receive() {
		t.Fatalf("cat: %v", err)
	}
	catSel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: cat.Msg().GetEvent().GetStart().GetPid()}}
	data := func(s string) *process.StreamInputRequest {
		return &process.StreamInputRequest{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(s)}}}}}
	}
	st.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: catSel}}})
	st.Send(data("before\n"))
	if !cat.Receive() || string(cat.Msg().GetEvent().GetData().GetStdout()) != "before\n" {
		t.Fatalf("cat's echo before: %v", cat.Err())
	}
	if err := keys.Remove("runner"); err != nil {
		t.Fatal(err)
	}
	st.Send(data("after\n"))
	if _, err := st.CloseAndReceive(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a removed key's input stream: %v", err)
	}
	cat.Close()

	// The traffic token: not for a key that may not reach ports; the
	// admin's is void once its key is gone.
	status, got := raw(t, d, "POST", "/e2b/v2/sandboxes/"+id+"/connect", "{}", "X-API-Key", roKey)
	if status != 200 || strings.Contains(got, "trafficAccessToken") {
		t.Errorf("a read-only key's connect: %d %s", status, got)
	}
}

// No credential of the daemon reaches a neuron through its ports, in any
// header or form, E2B's included.
func TestE2BCredentialsStayOut(t *testing.T) {
	d, key, _ := e2bDaemon(t)
	id, envdTok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"}}`)
	port := startPortServer(t, d, id)
	code, body, _ := get(t, d, fmt.Sprintf("/v1/neurons/%s/ports/%d/hi", id, port), map[string]string{"Authorization": "Bearer " + key["a"], "X-Access-Token": envdTok})
	if code != 200 || !strings.Contains(body, `auth=""`) {
		t.Errorf("an E2B key as the bearer of a port request: %d %s", code, body)
	}
}

// envdFS is the official Connect client of a sandbox's filesystem.
func envdFS(d *daemon, id, token string) filesystemconnect.FilesystemClient {
	hc := &http.Client{Transport: headerTransport{"E2b-Sandbox-Id": id, "X-Access-Token": token}}
	return filesystemconnect.NewFilesystemClient(hc, d.ts.URL+api.E2BSandboxPrefix)
}

// WatchDir streams a directory's changes; the polling watchers keep them
// for their sandbox alone, and end when removed.
func TestE2BWatch(t *testing.T) {
	d, key, _ := e2bDaemon(t)
	id, tok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"}}`)
	other, otherTok := e2bSandboxOf(t, d, key["b"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"b"}}`)
	run := func(script string) {
		t.Helper()
		if _, code, err := envdRun(t, envdClient(d, id, tok), "sh", "-c", script); err != nil || code != 0 {
			t.Fatalf("%s: %d %v", script, code, err)
		}
	}
	run("mkdir -p w/sub")
	fs := envdFS(d, id, tok)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "w", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("the watch's start: %v", st.Err())
	}
	run("echo 1 > w/sub/a.txt")
	got := map[string]bool{}
	for !got["sub/a.txt "+filesystem.EventType_EVENT_TYPE_CREATE.String()] && st.Receive() {
		if ev := st.Msg().GetFilesystem(); ev != nil {
			got[ev.GetName()+" "+ev.GetType().String()] = true
		}
	}
	if !got["sub/a.txt EVENT_TYPE_CREATE"] {
		t.Fatalf("events: %v (%v)", got, st.Err())
	}
	cancel()
	st.Close()

	wr, err := fs.CreateWatcher(context.Background(), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	wid := wr.Msg.GetWatcherId()
	run("echo 2 > w/b.txt")
	var names []string
	waittest.For(t, 10*time.Second, "the watcher's events", func() bool {
		r, err := fs.GetWatcherEvents(context.Background(), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.GetEvents() {
			names = append(names, ev.GetName())
		}
		return slices.Contains(names, "b.txt")
	})
	// Another sandbox's token knows no such watcher.
	if _, err := envdFS(d, other, otherTok).GetWatcherEvents(context.Background(), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another sandbox's poll of the watcher: %v", err)
	}
	if _, err := fs.RemoveWatcher(context.Background(), connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: wid})); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.GetWatcherEvents(context.Background(), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed watcher: %v", err)
	}
	if _, err := fs.CreateWatcher(context.Background(), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "no-such-dir"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a watcher of a missing directory: %v", err)
	}

	// Many watchers at once pass no bound together, and a WatchDir
	// stream counts against the same bound.
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := fs.CreateWatcher(context.Background(), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"})); err == nil {
				mu.Lock()
				made++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if made != 16 {
		t.Errorf("%d watchers made at once in one sandbox, want the bound, 16", made)
	}
	st2, err := fs.WatchDir(context.Background(), connect.NewRequest(&filesystem.WatchDirRequest{Path: "w"}))
	if err == nil {
		st2.Receive()
		err = st2.Err()
		st2.Close()
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a WatchDir beyond the bound: %v", err)
	}
}

// A call as root (E2B's SDKs say the user in a Basic header) is refused,
// not run as the neuron's user.
func TestE2BNoRoot(t *testing.T) {
	d, key, _ := e2bDaemon(t)
	id, tok := e2bSandboxOf(t, d, key["a"], "POST", "/e2b/v2/sandboxes", `{"metadata":{"team":"a"}}`)
	hc := &http.Client{Transport: headerTransport{"E2b-Sandbox-Id": id, "X-Access-Token": tok, "Authorization": "Basic cm9vdDo="}}
	c := processconnect.NewProcessClient(hc, d.ts.URL+api.E2BSandboxPrefix)
	if _, _, err := envdRun(t, c, "id", "-u"); err == nil {
		t.Fatal("a command as root ran")
	}
	hc.Transport = headerTransport{"E2b-Sandbox-Id": id, "X-Access-Token": tok, "Authorization": "Basic dXNlcjo="} // user:
	if out, _, err := envdRun(t, processconnect.NewProcessClient(hc, d.ts.URL+api.E2BSandboxPrefix), "echo", "ok"); err != nil || out != "ok\n" {
		t.Fatalf("a command as user: %q %v", out, err)
	}
	refused(t, d, http.StatusBadRequest, "GET", "/e2b/sandbox/files?path=x&username=root", "", "E2b-Sandbox-Id", id, "X-Access-Token", tok)
}
