package sandbox

import (
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// allowedEnv names the operator variables a neuron may inherit. Everything
// else is dropped: API keys, cloud credentials, SSH agents, tokens.
var allowedEnv = map[string]bool{
	"PATH": true, "LANG": true, "LANGUAGE": true, "TZ": true, "TERM": true,
	"COLORTERM": true, "USER": true, "LOGNAME": true,
}

// secretLike matches names that look like credentials; they are refused even
// when an allow-list rule would admit them.
func secretLike(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "SESSION", "COOKIE"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	for _, p := range []string{"AWS_", "SSH_", "GPG_", "AZURE_", "GOOGLE_", "GCP_", "GH_", "GITHUB_", "NSYS_CORTEX_"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// AgentEnv builds a neuron's environment from the operator's: only
// allow-listed names (and LC_*) pass, secret-looking names never do, then
// set is applied (KEY=VALUE, the backend's own variables and what the
// operator granted by name).
func AgentEnv(host []string, set ...string) []string {
	out := make([]string, 0, len(set)+8)
	for _, kv := range host {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || secretLike(k) {
			continue
		}
		if allowedEnv[k] || strings.HasPrefix(k, "LC_") {
			out = append(out, kv)
		}
	}
	return protocol.MergeEnv(out, set)
}

// ProxyEnv is what points a neuron's programs at its egress proxy (at
// addr, host:port): both spellings of the proxy variables, and no_proxy
// for the neuron's own loopback and host name (servers inside it).
func ProxyEnv(addr, id string) []string {
	proxy := "http://" + addr
	noProxy := "localhost,127.0.0.1,::1," + id
	return []string{"http_proxy=" + proxy, "https_proxy=" + proxy, "HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy,
		"no_proxy=" + noProxy, "NO_PROXY=" + noProxy}
}
