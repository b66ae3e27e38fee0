package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

const adminToken = "admin-token-of-the-daemon-0123456789"

// keyed is a daemon with API keys, and a client per key.
type keyed struct {
	*daemon
	keys  *apikey.Store
	log   *factLog
	token map[string]string
}

func newKeyed(t *testing.T, limits api.KeyLimits, keys ...apikey.Key) *keyed {
	t.Helper()
	lay, err := layout.New(filepath.Join(t.TempDir(), "keys"), "")
	if err != nil {
		t.Fatal(err)
	}
	k := &keyed{keys: apikey.Open(lay), log: &factLog{}, token: map[string]string{}}
	for _, key := range keys {
		tok, _, err := k.keys.Create(key)
		if err != nil {
			t.Fatal(err)
		}
		k.token[key.Name] = tok
	}
	k.daemon = newDaemon(t, api.Options{Token: adminToken, Keys: k.keys, KeyLimits: limits, Gate: &gate.Gate{Audit: k.log},
		URLKey: []byte(strings.Repeat("u", 32))})
	return k
}

func (k *keyed) client(t *testing.T, name string) *cortex.Client {
	t.Helper()
	c, err := cortex.New(k.ts.URL, cortex.WithToken(k.token[name]))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (k *keyed) as(t *testing.T, name, method, path, body string) (int, string) {
	t.Helper()
	return raw(t, k.daemon, method, path, body, "Authorization", "Bearer "+k.token[name])
}

// Two tenants share a daemon: each key sees, and touches, only the
// neurons its selector matches, and another tenant's neuron is one that
// does not exist (404, as for an id nobody holds) on every route, so ids
// do not leak. Its creates get its labels and cannot take another's.
func TestKeysTenants(t *testing.T) {
	k := newKeyed(t, api.KeyLimits{},
		apikey.Key{Name: "a", Scopes: []gate.Scope{gate.ScopeAdmin}, Selector: labels.Set{"team": "a"}},
		apikey.Key{Name: "b", Scopes: []gate.Scope{gate.ScopeAdmin}, Selector: labels.Set{"team": "b"}})
	ctx := context.Background()
	ca, cb := k.client(t, "a"), k.client(t, "b")
	made, err := ca.Create(ctx, &cortex.CreateRequest{ID: "na", Mode: process.Mode, Labels: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if made.Neuron.Labels["team"] != "a" || made.Neuron.Labels["app"] != "x" {
		t.Fatalf("a key's neuron got labels %v; want team=a added", made.Neuron.Labels)
	}
	if _, err := cb.Create(ctx, &cortex.CreateRequest{ID: "nb", Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Create(ctx, &cortex.CreateRequest{ID: "sneak", Mode: process.Mode, Labels: map[string]string{"team": "b"}}); !errors.As(err, &cortex.PolicyDeniedError{}) {
		t.Fatalf("a key creating a neuron in another tenant: %v", err)
	}

	// Every route that names a neuron answers b's key about a's neuron
	// as about one nobody holds: the test walks the router's own table.
	_, want := k.as(t, "b", "GET", "/v1/neurons/nosuch", "")
	for _, r := range k.srv.Routes() {
		if !strings.Contains(r.Pattern, "{id}") {
			continue
		}
		path := strings.NewReplacer("{id}", "na", "{pid}", "1", "{name}", "n1", "{port}", "8080", "{path...}", "x").Replace(r.Pattern)
		status, body := k.as(t, "b", r.Method, path, `{}`)
		if status != http.StatusNotFound || body != strings.ReplaceAll(want, "nosuch", "na") {
			t.Errorf("%s %s by another tenant's key: %d %s; want what an unknown id gets (%s)", r.Method, r.Pattern, status, body, want)
		}
	}
	list, err := cb.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "nb" {
		t.Fatalf("b's list: %v, %v", list, err)
	}
	// b cannot take a's id, relabel its own into a, nor diff against a's.
	if _, err := cb.Create(ctx, &cortex.CreateRequest{ID: "na", Mode: process.Mode}); !errors.As(err, &cortex.ExistsError{}) {
		t.Fatalf("b creating a's id: %v", err)
	}
	if status, body := k.as(t, "b", "PATCH", "/v1/neurons/nb/labels", `{"set":{"team":"a"}}`); status != 403 || !strings.Contains(body, "selector") {
		t.Fatalf("b relabelling its neuron into a: %d %s", status, body)
	}
	if status, body := k.as(t, "b", "GET", "/v1/neurons/nb/diff?against=na", ""); status != 404 || !strings.Contains(body, `neuron \"na\" not found`) {
		t.Fatalf("b diffing against a's neuron: %d %s", status, body)
	}
	if status, _ := k.as(t, "b", "GET", "/v1/sessions", ""); status != 403 {
		t.Fatalf("a tenant's key listing chat sessions: %d", status)
	}
	if status, _ := k.as(t, "b", "GET", "/metrics", ""); status != 403 {
		t.Fatalf("a tenant's key reading the daemon's metrics: %d", status)
	}
	st, err := k.c.Get(ctx, "na")
	if err != nil || st.Status != "running" || st.Labels["team"] != "a" {
		t.Fatalf("a's neuron after b's tries: %+v, %v", st, err)
	}

	// A fork or an import by a key stays in its tenant.
	if _, err := ca.Neuron("na").Fork(ctx, &cortex.NeuronForkRequest{ID: "na2", Labels: map[string]string{"x": "1"}}); err != nil {
		t.Fatal(err)
	}
	var arch bytes.Buffer
	if err := k.c.Neuron("nb").Export(ctx, &arch, false); err != nil {
		t.Fatal(err)
	}
	archBytes := bytes.Clone(arch.Bytes())
	imp, err := ca.Import(ctx, &arch, "from-b")
	if err != nil {
		t.Fatal(err)
	}
	// A key has two imports in flight at most (each holds a step of the
	// room while its upload lasts): a's third is told to wait, b's runs,
	// and a's run again once its stalled uploads end.
	importAs := func(name, id string, body io.Reader) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", k.ts.URL+"/v1/neurons/import?id="+id, body)
		req.Header.Set("Authorization", "Bearer "+k.token[name])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Three stalled uploads of a's at once: whichever two reach the daemon
	// first hold the key's two slots for as long as they stall, and the
	// third is told to wait, at once. (A probe that ends quickly, tried
	// until it was turned away, raced the stalls for the slots it held
	// for a moment, and under load lost for 30 s.) Each is closed at the
	// end whatever happens, so no connection outlives the test.
	stalls := make([]*io.PipeWriter, 3)
	stallDone := make(chan int, 3) // the index of an upload that ended
	stallStatus := make([]int, 3)
	var statusMu sync.Mutex
	for i := range stalls {
		pr, pw := io.Pipe()
		stalls[i] = pw
		go func() {
			status, _ := importAs("a", fmt.Sprintf("stall%d", i), pr)
			statusMu.Lock()
			stallStatus[i] = status
			statusMu.Unlock()
			stallDone <- i
		}()
		go pw.Write(archBytes[:len(archBytes)/2])
	}
	t.Cleanup(func() {
		for _, pw := range stalls {
			pw.CloseWithError(errors.New("the test ended"))
		}
	})
	third := waittest.Recv(t, 30*time.Second, "one of three stalled imports by one key to be turned away", stallDone)
	statusMu.Lock()
	status := stallStatus[third]
	statusMu.Unlock()
	if status != http.StatusTooManyRequests {
		t.Fatalf("of three stalled imports by one key, one ended with %d, want 429 (the key's two slots held by the others)", status)
	}
	if status, _ := importAs("a", "fourth", strings.NewReader("not an archive")); status != http.StatusTooManyRequests {
		t.Fatalf("a fourth import by a key with two stalled ones: %d, want 429", status)
	}
	if status, body := importAs("b", "b-beside", bytes.NewReader(archBytes)); status != http.StatusCreated {
		t.Fatalf("b's import beside a's stalled ones: %d %s", status, body)
	}
	for _, pw := range stalls {
		pw.CloseWithError(errors.New("the uploader went away"))
	}
	for range 2 {
		waittest.Recv(t, 30*time.Second, "the stalled imports to end", stallDone)
	}
	if !waittest.Until(10*time.Second, func() bool {
		status, _ := importAs("a", "a-after", bytes.NewReader(archBytes))
		return status == http.StatusCreated
	}) {
		t.Fatal("a's import after its stalled ones ended was refused")
	}
	for id, got := range map[string]map[string]string{"na2": nil, "from-b": imp.Labels} {
		if got == nil {
			n, err := k.c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			got = n.Labels
		}
		if got["team"] != "a" {
			t.Errorf("%s, made by a's key: labels %v", id, got)
		}
	}

	// Events: a tenant's stream holds its neurons' alone, each naming the
	// key that acted; the audit names it too.
	var seen []string
	for ev, err := range ca.Events(ctx, cortex.EventsOptions{Since: time.Unix(1, 0), Until: time.Now()}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Neuron)
		if ev.Neuron == "na" && ev.Type == "created" && ev.Principal != "api:a" {
			t.Errorf("na's created event names %q", ev.Principal)
		}
	}
	if strings.Contains(strings.Join(seen, ","), "nb") || !strings.Contains(strings.Join(seen, ","), "na") {
		t.Errorf("a's events: %v", seen)
	}
	if !k.hasFact("api:a", string(gate.Create), "allow") || !k.hasFact("api:b", string(gate.Read), "deny") {
		t.Errorf("the audit does not name the keys: %v", k.log.facts)
	}

	// A removed key is refused from the next request on.
	if err := k.keys.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.List(ctx); !errors.As(err, &cortex.UnauthorizedError{}) {
		t.Fatalf("a removed key: %v", err)
	}
}

func (k *keyed) hasFact(principal, action, effect string) bool {
	k.log.mu.Lock()
	defer k.log.mu.Unlock()
	for _, f := range k.log.facts {
		if f["principal"] == principal && f["action"] == action && f["effect"] == effect {
			return true
		}
	}
	return false
}

// A key does what its scopes allow and nothing else: every route is
// walked with a read-only key, which may read and is refused the rest.
func TestKeysScopes(t *testing.T) {
	k := newKeyed(t, api.KeyLimits{},
		apikey.Key{Name: "ro", Scopes: []gate.Scope{gate.ScopeRead}},
		apikey.Key{Name: "runner", Scopes: []gate.Scope{gate.ScopeExec}})
	k.create(t, "n")
	for _, r := range k.srv.Routes() {
		path := strings.NewReplacer("{id}", "n", "{pid}", "1", "{sid}", "s1", "{name}", "n1", "{port}", "8080", "{path...}", "x").Replace(r.Pattern)
		if r.Pattern == "/v1/events" {
			path += "?until=0s"
		}
		status, body := k.as(t, "ro", r.Method, path, `{}`)
		denied := status == 403 && strings.Contains(body, "scopes")
		if want := gate.ScopeOf(r.Action) != gate.ScopeRead; denied != want {
			t.Errorf("%s %s (%s) by a read-only key: %d %s", r.Method, r.Pattern, r.Action, status, body)
		}
	}
	ctx := context.Background()
	runner := k.client(t, "runner").Neuron("n")
	if res, err := runner.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"echo", "ok"}}}); err != nil || strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Fatalf("exec with the exec scope: %v, %v", res, err)
	}
	if _, err := runner.WriteFile(ctx, "f", strings.NewReader("x"), nil); !errors.As(err, &cortex.PolicyDeniedError{}) {
		t.Fatalf("a file write with the exec scope: %v", err)
	}
	if _, err := k.client(t, "runner").Create(ctx, &cortex.CreateRequest{ID: "m", Mode: process.Mode}); !errors.As(err, &cortex.PolicyDeniedError{}) {
		t.Fatalf("a create with the exec scope: %v", err)
	}
}

// Per-key limits answer 429 with Retry-After: a rate over the key's, and
// creates past the neurons it may hold. The admin token has no limits.
func TestKeysLimits(t *testing.T) {
	k := newKeyed(t, api.KeyLimits{Rate: 1000},
		apikey.Key{Name: "slow", Scopes: []gate.Scope{gate.ScopeRead}, Rate: 0.5},
		apikey.Key{Name: "small", Scopes: []gate.Scope{gate.ScopeAdmin}, Selector: labels.Set{"team": "s"}, MaxNeurons: 1})
	ctx := context.Background()
	slow := k.client(t, "slow")
	var limited error
	for i := 0; i < 20 && limited == nil; i++ {
		_, limited = slow.List(ctx)
	}
	var rl cortex.RateLimitedError
	if !errors.As(limited, &rl) || rl.Status != http.StatusTooManyRequests || rl.RetryAfter < time.Second {
		t.Fatalf("a key over its rate: %v (%+v)", limited, rl)
	}
	for range 30 {
		if _, err := k.c.List(ctx); err != nil {
			t.Fatalf("the admin token is limited: %v", err)
		}
	}
	small := k.client(t, "small")
	if _, err := small.Create(ctx, &cortex.CreateRequest{ID: "one", Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Create(ctx, &cortex.CreateRequest{ID: "two", Mode: process.Mode}); !errors.As(err, &rl) || !strings.Contains(rl.Message, "may hold 1") {
		t.Fatalf("a create past the key's neurons: %v", err)
	}
	if _, err := small.Neuron("one").Fork(ctx, &cortex.NeuronForkRequest{ID: "three"}); !errors.As(err, &rl) {
		t.Fatalf("a fork past the key's neurons: %v", err)
	}
	if err := small.Destroy(ctx, "one", false); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Create(ctx, &cortex.CreateRequest{ID: "two", Mode: process.Mode}); err != nil {
		t.Fatalf("a create once the key's neuron stopped: %v", err)
	}
}

// What the review of the keys found, each tried again: a wiped neuron's
// snapshots stay their tenant's (another tenant cannot take the id to
// reach them); a restore that starts a stopped neuron counts against the
// neuron limit; a signed URL a key made is void once the key is removed,
// and is audited as the key's; tenants are told apart by one label key.
func TestKeysReview(t *testing.T) {
	k := newKeyed(t, api.KeyLimits{},
		apikey.Key{Name: "a", Scopes: []gate.Scope{gate.ScopeAdmin}, Selector: labels.Set{"team": "a"}, MaxNeurons: 1},
		apikey.Key{Name: "b", Scopes: []gate.Scope{gate.ScopeAdmin}, Selector: labels.Set{"team": "b"}},
		apikey.Key{Name: "runner", Scopes: []gate.Scope{gate.ScopeExec}, Selector: labels.Set{"team": "b"}})
	ctx := context.Background()
	if _, err := k.client(t, "a").Create(ctx, &cortex.CreateRequest{ID: "proj", Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	if status, body := k.as(t, "a", "POST", "/v1/neurons/proj/snapshots", `{"name":"s1"}`); status != 201 {
		t.Fatalf("snapshot: %d %s", status, body)
	}
	if status, body := k.as(t, "a", "DELETE", "/v1/neurons/proj?wipe=true", ""); status != 204 {
		t.Fatalf("wipe: %d %s", status, body)
	}
	if status, body := k.as(t, "b", "POST", "/v1/neurons", `{"id":"proj","mode":"process"}`); status != 409 || !strings.Contains(body, "taken") {
		t.Fatalf("b taking a's wiped id, whose snapshots remain: %d %s", status, body)
	}
	if status, _ := k.as(t, "b", "GET", "/v1/neurons/proj/snapshots", ""); status != 404 {
		t.Fatalf("b listing a's wiped neuron's snapshots: %d", status)
	}
	if status, body := k.as(t, "a", "GET", "/v1/neurons/proj/snapshots", ""); status != 200 || !strings.Contains(body, `"s1"`) {
		t.Fatalf("a listing its own wiped neuron's snapshots: %d %s", status, body)
	}

	// a holds one neuron at most: a restore that would start a stopped
	// one while another runs is refused.
	if status, body := k.as(t, "a", "POST", "/v1/neurons", `{"id":"proj","mode":"process"}`); status != 201 {
		t.Fatalf("a taking its id again: %d %s", status, body)
	}
	k.as(t, "a", "POST", "/v1/neurons/proj/snapshots", `{"name":"s2"}`)
	k.as(t, "a", "DELETE", "/v1/neurons/proj", "")
	if status, body := k.as(t, "a", "POST", "/v1/neurons", `{"id":"other","mode":"process"}`); status != 201 {
		t.Fatalf("a's second neuron, the first stopped: %d %s", status, body)
	}
	if status, body := k.as(t, "a", "POST", "/v1/neurons/proj/snapshots/s2/restore", `{}`); status != 429 {
		t.Fatalf("a restore starting a neuron past the limit: %d %s", status, body)
	}

	// A signed URL of a key's is the key's.
	if _, err := k.client(t, "b").Create(ctx, &cortex.CreateRequest{ID: "web", Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	u, err := k.client(t, "runner").Neuron("web").URL(ctx, 8080, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The first answer is the proxy's redirect that takes the token out of
	// the address (into a cookie): not followed here.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	open := func() (int, string) {
		resp, err := noFollow.Get(u.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := open(); status != http.StatusFound && status != http.StatusSeeOther {
		t.Fatalf("the key's signed URL while the key is there: %d %s", status, body)
	}
	if !k.hasFact("api:runner via signed-url", string(gate.Port), "allow") {
		t.Errorf("the signed URL's use is not audited as the key's: %v", k.log.facts)
	}
	if err := k.keys.Remove("runner"); err != nil {
		t.Fatal(err)
	}
	if status, body := open(); status != 401 || !strings.Contains(body, "removed") {
		t.Fatalf("the key's signed URL once the key is gone: %d %s", status, body)
	}
	if _, _, err := k.keys.Create(apikey.Key{Name: "c", Scopes: []gate.Scope{gate.ScopeRead}, Selector: labels.Set{"env": "prod"}}); err == nil || !strings.Contains(err.Error(), "same labels") {
		t.Fatalf("a tenant key on another label key: %v", err)
	}
}
