package nsbox_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// secretValue is split in two wherever a script inside needs it, so that
// no command line in the neuron holds it whole.
const secretA, secretB = "sk-live-0123456789", "abcdef-the-real-one"

// nodeFetch makes one HTTPS request through the proxy from Node, by hand
// (CONNECT, then TLS on that socket: Node's own fetch does not use
// https_proxy), trusting what NODE_EXTRA_CA_CERTS adds.
const nodeFetch = `const http=require("http"),tls=require("tls");
const host=process.argv[1],port=+process.argv[2],p=new URL(process.env.https_proxy);
http.request({host:p.hostname,port:p.port,method:"CONNECT",path:host+":"+port}).on("connect",(res,sock)=>{
 if(res.statusCode!==200){console.log("CONNECT "+res.statusCode);process.exit(1)}
 const s=tls.connect({socket:sock,host:host},()=>s.write("GET /node HTTP/1.1\r\nHost: "+host+"\r\nAuthorization: Bearer "+process.env.OPENAI_API_KEY+"\r\nConnection: close\r\n\r\n"));
 let out="";s.on("data",d=>out+=d);s.on("end",()=>console.log(out.split("\r\n\r\n").slice(1).join("")));
 s.on("error",e=>{console.log("TLS: "+e.message);process.exit(1)});
}).end();`

// TestSecretsNeverEnterTheNeuron: a secret given at create reaches the
// HTTPS server it is for, from curl and from Node inside, while the
// neuron holds only a placeholder: not in its environment, its /proc, its
// files or the log; the placeholder sent anywhere else is refused.
func TestSecretsNeverEnterTheNeuron(t *testing.T) {
	requireCurl(t)
	value := secretA + secretB
	var mu sync.Mutex
	var seen []string
	record := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+value {
			http.Error(w, "wrong key", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "authenticated")
	}
	api, apiCA := sandboxtest.TLSServer(t, "127.0.0.1", http.HandlerFunc(record))
	other := httptest.NewServer(http.HandlerFunc(record)) // allowed, plain HTTP
	t.Cleanup(other.Close)
	caFile := filepath.Join(t.TempDir(), "upstream.pem")
	if err := os.WriteFile(caFile, apiCA, 0o644); err != nil {
		t.Fatal(err)
	}
	apiHost, otherHost := api.Listener.Addr().String(), other.Listener.Addr().String()
	opts := sandbox.CreateOptions{Network: sandbox.Network{Allow: []string{otherHost}},
		Secrets: []sandbox.Secret{{Name: "OPENAI_API_KEY", Value: value, Hosts: []string{apiHost}}}}
	if err := sandbox.AllowSecretHosts(&opts); err != nil {
		t.Fatal(err)
	}
	n := newNeuronWith(t, "secrets", opts, func(e *sandbox.Env) { e.EgressUpstreamCA = caFile })
	run := func(script string) string {
		t.Helper()
		res := n.sh(script)
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	}
	curl := "env -u no_proxy -u NO_PROXY curl -sS --max-time 20 -H \"Authorization: Bearer $OPENAI_API_KEY\" "
	if out := run(curl + "https://" + apiHost + "/curl"); out != "authenticated" {
		t.Errorf("curl to the secret's host: %q", out)
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		// The image's own trust store has the authority too.
		if out := run("env -u SSL_CERT_FILE -u CURL_CA_BUNDLE " + curl + "https://" + apiHost + "/store"); out != "authenticated" {
			t.Errorf("curl trusting /etc/ssl/certs/ca-certificates.crt alone: %q", out)
		}
	}
	if _, err := exec.LookPath("node"); err == nil {
		if out := run("env -u no_proxy -u NO_PROXY node -e '" + nodeFetch + "' 127.0.0.1 " + fmt.Sprint(api.Listener.Addr().(*net.TCPAddr).Port)); out != "authenticated" {
			t.Errorf("Node to the secret's host: %q", out)
		}
	} else if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" {
		t.Error("the secrets test runs Node inside the neuron (from the host's /usr): install nodejs")
	} else {
		t.Log("node is not installed: the Node client is not tried")
	}

	// Inside, only the placeholder: the environment, every process's
	// environment and command line, and the files a program could read.
	placeholder := run("printenv OPENAI_API_KEY")
	if !strings.HasPrefix(placeholder, "cortex-placeholder-") {
		t.Errorf("OPENAI_API_KEY inside is %q", placeholder)
	}
	find := fmt.Sprintf(`A=%s; B=%s; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < $f 2>/dev/null | grep -qF "$A$B" && echo "in $f"; done; `+
		`grep -rlsF "$A$B" /run /tmp /etc /home /var 2>/dev/null; echo searched`, secretA, secretB)
	if out := run(find); out != "searched" {
		t.Errorf("the secret's value is inside the neuron:\n%s", out)
	}

	// In a header a server may quote back, or with another Host: refused,
	// or told its own name.
	if out := run("env -u no_proxy -u NO_PROXY curl -sS --max-time 20 -o /dev/null -w '%{http_code}' -H \"OpenAI-Organization: $OPENAI_API_KEY\" https://" + apiHost + "/org"); out != "403" {
		t.Errorf("the placeholder in a header not a credential's: %q, want 403", out)
	}
	if out := run(curl + "-H 'Host: evil.example' https://" + apiHost + "/front"); out != "authenticated" {
		t.Errorf("another Host: %q", out)
	}
	mu.Lock()
	for _, s := range seen {
		if strings.Contains(s, "evil.example") || strings.Contains(s, "/org") {
			t.Errorf("the server got %q", s)
		}
	}
	mu.Unlock()
	// The placeholder to another allowed host, over plain HTTP: refused,
	// and that server never sees it.
	if out := run(curl + "-o /dev/null -w '%{http_code}' http://" + otherHost + "/plain"); out != "403" {
		t.Errorf("the placeholder to another host: %q, want 403", out)
	}
	mu.Lock()
	for _, s := range seen {
		if strings.Contains(s, "/plain") || strings.Contains(s, otherHost) {
			t.Errorf("the other host got %q", s)
		}
	}
	mu.Unlock()
	logData, _ := os.ReadFile(filepath.Join(n.env.Layout.LogsDir(), "neurons", "secrets.log"))
	if !strings.Contains(string(logData), "secret OPENAI_API_KEY put in") ||
		!strings.Contains(string(logData), "carries the placeholder of secret OPENAI_API_KEY") {
		t.Errorf("the neuron's log lacks the proxy's decisions:\n%s", logData)
	}
	if strings.Contains(string(logData), value) {
		t.Errorf("the neuron's log holds the secret's value")
	}
}

// TestSecretsRefusals: secrets without network egress, to a host not on
// the allow-list, or with a value that would break a header fail create
// with an error naming what was wrong.
func TestSecretsRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		opts sandbox.CreateOptions
		want string
	}{
		"network none": {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkNone},
			Secrets: []sandbox.Secret{{Name: "K", Value: "v", Hosts: []string{"api.example.com"}}}}, "network egress"},
		"not allowed": {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"example.org"}},
			Secrets: []sandbox.Secret{{Name: "K", Value: "v", Hosts: []string{"api.example.com"}}}}, "not on the allow-list"},
		"header break": {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"api.example.com"}},
			Secrets: []sandbox.Secret{{Name: "K", Value: "v\r\nX: y", Hosts: []string{"api.example.com"}}}}, "line end"},
		"bad name": {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"api.example.com"}},
			Secrets: []sandbox.Secret{{Name: "1K", Value: "v", Hosts: []string{"api.example.com"}}}}, "secret name"},
	} {
		requireNsbox(t)
		m := nsbox.New(envInNewHome(t))
		defer m.Close()
		if _, err := m.Create(t.Context(), "refused", c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
