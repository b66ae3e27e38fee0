package boot

import (
	"fmt"
	"slices"
	"strings"
)

// The nsbox contract: the host starts `cortex-agent init` (nsboxinit.Init,
// internal/agent/nsboxinit), PID 1 of a new set of namespaces, and hands it
// an NsboxConfig as JSON on descriptor NsboxConfigFD: how to build the
// neuron's root, and how to start its agent. All paths are host paths
// unless named "inside". The JSON string NsboxGoAhead follows on the same
// descriptor once the host has put the sandbox into its cgroups: the agent
// starts only then.
//
// The descriptor is a stream socket. A host that keeps its end after the
// go-ahead (a warm pool's neuron, booted before anyone named it) may later
// send one NsboxClaim on it; PID 1 answers each with an NsboxClaimed. A
// host that closes its end sends none.
const (
	NsboxConfigFD = 3
	NsboxGoAhead  = "go"
)

// NsboxConfig is the configuration of a namespace sandbox.
type NsboxConfig struct {
	// Version is the boot contract's version the host wrote it in
	// (Version(); "" is 1.0). PID 1 reads it with DecodeNsboxConfig.
	Version  string `json:"version,omitempty"`
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	// Root is the overlay that becomes "/".
	Root OverlayMount `json:"root"`
	// Overlays are mounted on top, at their inside Target (e.g. /usr).
	Overlays []OverlayMount `json:"overlays,omitempty"`
	// Binds are bind mounts of host paths at inside targets.
	Binds []BindMount `json:"binds,omitempty"`
	// Network is "none" (loopback only, in a new network namespace),
	// "full" (the host's network namespace was kept) or "egress": PID 1
	// keeps the host's network namespace, gives the agent and everything
	// it starts a new one with only a loopback, and serves Egress there.
	Network string `json:"network"`
	// Egress is what PID 1 enforces when Network is "egress".
	Egress *NsboxEgress `json:"egress,omitempty"`
	// UID and GID are the agent's identity inside ("agent", 1000).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// OuterUID and OuterGID are what UID and GID map to in the sandbox's
	// first user namespace (the agent runs in a nested one of its own).
	OuterUID int `json:"outerUid"`
	OuterGID int `json:"outerGid"`
	// Rlimits are set on the agent and everything it starts.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// TmpBytes sizes the private /tmp (0: the kernel's default).
	TmpBytes int64 `json:"tmpBytes,omitempty"`
	// AgentArgs are the agent's arguments (after the program name).
	AgentArgs []string `json:"agentArgs"`
	// Env is the agent's whole environment.
	Env []string `json:"env"`
	// Workdir is the agent's working directory, inside.
	Workdir string `json:"workdir"`
	// Chown lists inside paths made the agent's own when they are created.
	Chown []string `json:"chown,omitempty"`
	// OOMWatch, when set, is where PID 1 finds how many processes the
	// kernel killed at the neuron's memory ceiling, to say so in the
	// neuron's log.
	OOMWatch *OOMWatch `json:"oomWatch,omitempty"`
	// Secret is the neuron's per-start secret. PID 1 hands it to every
	// agent it starts on a descriptor (--secret-fd), never on the neuron's
	// disk or in its environment.
	Secret string `json:"secret,omitempty"`
}

// NsboxClaim gives a warm neuron, which nothing has run in yet, the
// identity of the neuron it becomes: PID 1 sets the hostname and the
// neuron's /etc/hostname and /etc/hosts, rebinds the running agent
// (Rebind), and starts any later agent with the new identity.
type NsboxClaim struct {
	Rebind Rebind `json:"rebind"`
}

// NsboxClaimed is PID 1's answer to an NsboxClaim: Error is empty when
// the neuron is the claimed one.
type NsboxClaimed struct {
	Error string `json:"error,omitempty"`
}

// NsboxEtc is what a neuron's /etc/hostname and /etc/hosts hold, by name.
func NsboxEtc(id string) map[string]string {
	return map[string]string{
		"hosts":    fmt.Sprintf("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n", id),
		"hostname": id + "\n",
	}
}

// MergeEnv returns env with each KEY=VALUE of set in place of the entry
// of its key, or added.
func MergeEnv(env, set []string) []string {
	out := slices.Clone(env)
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

// OverlayMount is an overlayfs mount.
type OverlayMount struct {
	Target string   `json:"target"` // inside; "/" for the root
	Lower  []string `json:"lower"`  // topmost first
	Upper  string   `json:"upper"`
	Work   string   `json:"work"`
}

// NsboxEgress is a neuron's way out: an HTTP proxy on the neuron's
// loopback that reaches only the allow-listed destinations.
type NsboxEgress struct {
	// Allow is the allow-list (its syntax: internal/protocol/allowlist).
	Allow []string `json:"allow"`
	// Listen is the proxy's address inside, e.g. "127.0.0.1:3128".
	Listen string `json:"listen"`
	// StatsFD, when not 0, is NsboxEgressStatsFD: the host handed PID 1 a
	// file for the proxy's EgressStats there.
	StatsFD int `json:"statsFd,omitempty"`
	// Secrets are values the neuron never holds: its environment has each
	// one's Placeholder, and PID 1's proxy puts Value in its place in the
	// headers of HTTPS requests to its Hosts, terminating their TLS with
	// an authority of its own (EgressCAFile inside).
	Secrets []EgressSecret `json:"secrets,omitempty"`
	// UpstreamCAs are PEM certificates the proxy trusts for the servers
	// of the secrets' hosts, besides the host's own roots.
	UpstreamCAs string `json:"upstreamCAs,omitempty"`
}

// EgressSecret is one secret of NsboxEgress.
type EgressSecret struct {
	Name        string   `json:"name"`
	Placeholder string   `json:"placeholder"`
	Value       string   `json:"value"`
	Hosts       []string `json:"hosts"`
}

// EgressTunnelSecrets is what the host's end of an egress tunnel
// (`cortex-agent egress-tunnel --secrets-fd N`) reads on descriptor N,
// JSON, until its end: the secrets its proxy puts into requests, the
// authority it signs their hosts with (internal/protocol/egressca: made
// by the host, which gave the neuron its certificate), and the
// authorities the secrets' servers are checked against besides the
// host's roots. At most MaxEgressTunnelSecrets bytes.
type EgressTunnelSecrets struct {
	Secrets     []EgressSecret `json:"secrets"`
	CACert      string         `json:"caCert"`
	CAKey       string         `json:"caKey"`
	UpstreamCAs string         `json:"upstreamCAs,omitempty"`
}

// MaxEgressTunnelSecrets bounds EgressTunnelSecrets' encoding.
const MaxEgressTunnelSecrets = 4 << 20

// Where a neuron with secrets finds its proxy's authority, inside: a
// tmpfs of PID 1's, new at every start. EgressCABundle is the host's
// roots and the authority; it is also bound over the image's
// /etc/ssl/certs/ca-certificates.crt when that is a regular file.
const (
	EgressCADir    = "/run/nsys-cortex-ca"
	EgressCAFile   = EgressCADir + "/egress-ca.pem"
	EgressCABundle = EgressCADir + "/ca-bundle.pem"
)

// EnvEgressCA is where a kube pod's agent finds its egress proxy's
// authority, PEM (cortex-agent --egress-ca DIR writes it and a bundle
// there): the certificate the host made for the neuron's secrets. It is
// public; its key stays with the hosts.
const EnvEgressCA = "NSYS_CORTEX_EGRESS_CA"

// EgressCAEnv points the usual clients at EgressCABundle (OpenSSL, curl,
// Go, Python's requests, git) and Node at the authority it adds to its
// own roots.
func EgressCAEnv() []string {
	return []string{"SSL_CERT_FILE=" + EgressCABundle, "CURL_CA_BUNDLE=" + EgressCABundle, "REQUESTS_CA_BUNDLE=" + EgressCABundle,
		"GIT_SSL_CAINFO=" + EgressCABundle, "NODE_EXTRA_CA_CERTS=" + EgressCAFile}
}

// BindMount is a bind mount of a host path.
type BindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"` // inside
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Rlimit is one resource limit (RLIMIT_* number, soft = hard).
type Rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

// OOMWatch names the memory cgroup's file that counts OOM kills: Dir is
// a host directory PID 1 opens before it builds the root (the memory
// controller's mount), Rel the file beneath it, which the host makes
// before its go-ahead, and Key the counter in it (oom_kill).
type OOMWatch struct {
	Dir   string `json:"dir"`
	Rel   string `json:"rel"`
	Key   string `json:"key"`
	Limit int64  `json:"limit"` // the ceiling, bytes, for the log line
}
