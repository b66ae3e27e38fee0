package kube_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Secrets in kube mode: the neuron holds a placeholder, and the proxy
// of whichever host holds its tunnel puts the value into its HTTPS
// requests to the secret's host, which the neuron's programs trust
// through the authority its agent wrote. The value goes nowhere else: a
// plain-HTTP request that carries the placeholder is refused, and the
// value is in no log line. A second host (a replica with the same key)
// takes the tunnel with the secrets, from the cluster alone; started
// again without them, the neuron has none.
func TestSecrets(t *testing.T) {
	core, ag, cfg := besideController(t)
	ctx := context.Background()
	const value = "sk-live-0123456789"

	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+value {
			w.WriteHeader(http.StatusUnauthorized)
		}
		// What it got, back: the proxy masks the value in answers.
		io.WriteString(w, "got "+r.Header.Get("Authorization"))
	}))
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "https://")
	caFile := filepath.Join(t.TempDir(), "upstream.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "plain got "+r.Header.Get("Authorization"))
	}))
	defer plain.Close()
	plainAddr := strings.TrimPrefix(plain.URL, "http://")

	var logMu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	m := manager(t, core, ag, cfg)
	m.AgentBinary, m.EgressUpstreamCA, m.Logf = buildAgent(t), caFile, logf
	opts := sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{upAddr, plainAddr}},
		Secrets: []sandbox.Secret{{Name: "API_KEY", Value: value, Hosts: []string{upAddr}}}, BootTimeout: 30 * time.Second}
	if _, err := m.Create(ctx, "sec", opts); err != nil {
		t.Fatal(err)
	}
	st, err := m.Get(ctx, "sec")
	if err != nil || st.Policy == nil || len(st.Policy.Secrets) != 1 || st.Policy.Secrets[0].Name != "API_KEY" || !slices.Equal(st.Policy.Secrets[0].Hosts, []string{upAddr}) {
		t.Fatalf("its policy: %+v %v", st.Policy, err)
	}
	run := func(m *kube.Manager, shell string) string {
		t.Helper()
		c, err := m.Connect(ctx, "sec")
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: shell}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	}
	// Through the proxy its variables name (--noproxy '': the test's
	// servers are on a loopback the variables leave out), trusting what
	// its variables name (curl: CURL_CA_BUNDLE).
	fetch := func(m *kube.Manager, url string) string {
		return run(m, `curl -sS --noproxy '' -m 10 -H "Authorization: Bearer $API_KEY" -o /dev/stdout -w ' %{http_code}' `+url)
	}
	held := strings.TrimSpace(run(m, `echo "$API_KEY"`))
	if !strings.HasPrefix(held, "cortex-placeholder-") {
		t.Fatalf("the neuron holds %q", held)
	}
	waittest.For(t, 20*time.Second, "the host to hold the neuron's tunnel", func() bool {
		return strings.HasSuffix(fetch(m, up.URL+"/"), " 200")
	})
	if got := fetch(m, up.URL+"/"); got != "got Bearer "+strings.Repeat("*", len(value))+" 200" {
		t.Errorf("the answer, masked: %q", got)
	}
	// Its placeholder to another host, in plain HTTP: refused, not sent.
	if got := fetch(m, plain.URL+"/"); !strings.HasSuffix(got, " 403") {
		t.Errorf("the placeholder over plain HTTP: %q", got)
	}
	// The authority it trusts is its own, and only the neuron's.
	if got := run(m, `test -s "$SSL_CERT_FILE" && test -s "$NODE_EXTRA_CA_CERTS" && echo ok`); got != "ok" {
		t.Errorf("the authority's files: %q", got)
	}

	// A replica with the same key takes the tunnel, secrets and all.
	m2 := &kube.Manager{Cluster: &kube.Cluster{Core: core, Agents: ag, Config: cfg}, Key: m.Key, AgentBinary: m.AgentBinary, EgressUpstreamCA: caFile, Logf: logf}
	t.Cleanup(func() { m2.Close() })
	m2.Connect(ctx, "sec")
	m.Close()
	waittest.For(t, 30*time.Second, "the second host to take the tunnel", func() bool {
		return strings.HasSuffix(fetch(m2, up.URL+"/"), " 200")
	})

	// Started again without secrets: none, and nothing is put in.
	if err := m2.Destroy(ctx, "sec", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	opts.Secrets = nil
	if _, err := m2.Create(ctx, "sec", opts); err != nil {
		t.Fatal(err)
	}
	if got := run(m2, `echo "[$API_KEY]"`); got != "[]" {
		t.Errorf("started again without secrets, the neuron holds %q", got)
	}
	if st, err := m2.Get(ctx, "sec"); err != nil || len(st.Policy.Secrets) != 0 {
		t.Errorf("started again without secrets: %+v %v", st.Policy, err)
	}
	waittest.For(t, 20*time.Second, "the tunnel of the neuron started again", func() bool {
		return strings.HasSuffix(run(m2, `curl -sS --noproxy '' -m 10 -o /dev/null -w '%{http_code}' `+plain.URL+"/"), "200")
	})
	logMu.Lock()
	defer logMu.Unlock()
	all := strings.Join(logs, "\n")
	if strings.Contains(all, value) {
		t.Error("the value is in the host's log")
	}
	if !strings.Contains(all, "secret API_KEY put in") {
		t.Errorf("no log line says the secret was put in:\n%s", all)
	}
}
