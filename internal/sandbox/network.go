package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// CheckNetwork checks the shape of a network request, whatever a mode then
// enforces of it: the mode is none, egress or full; an allow-list goes with
// egress only, and egress needs one whose every rule parses.
func CheckNetwork(n Network) error {
	switch n.Mode {
	case NetworkDefault, NetworkNone, NetworkFull:
		if len(n.Allow) > 0 {
			return &InvalidError{Reason: "a network allow-list goes with network egress (--allow alone implies it)"}
		}
	case NetworkEgress:
		if len(n.Allow) == 0 {
			return &InvalidError{Reason: "network egress needs an allow-list (--allow HOST[:PORT], *.DOMAIN or CIDR); with nothing to reach, use network none"}
		}
		if _, err := allowlist.Parse(n.Allow); err != nil {
			return &InvalidError{Reason: "network allow-list: " + err.Error()}
		}
	default:
		return &InvalidError{Reason: fmt.Sprintf("network %q: choose none, egress or full", n.Mode)}
	}
	return nil
}

// CheckSecrets checks opts' secrets against its network: each is named as
// an environment variable is, once, has a value that fits in a header,
// and goes to hosts on the egress allow-list (which they need: the egress
// proxy is what puts them in).
func CheckSecrets(opts CreateOptions) error {
	if len(opts.Secrets) == 0 {
		return nil
	}
	if opts.Network.Mode != NetworkEgress {
		return &InvalidError{Reason: "secrets go with network egress: the egress proxy puts them into requests (--allow HOST for each secret's host)"}
	}
	pol, err := allowlist.Parse(opts.Network.Allow)
	if err != nil {
		return &InvalidError{Reason: "network allow-list: " + err.Error()}
	}
	seen := map[string]bool{}
	for _, s := range opts.Secrets {
		if len(s.Name) > 128 || !protocol.ValidEnvName(s.Name) {
			return &InvalidError{Reason: fmt.Sprintf("secret name %q: letters, digits and '_', not starting with a digit", s.Name)}
		}
		if seen[s.Name] {
			return &InvalidError{Reason: fmt.Sprintf("secret %s is named twice", s.Name)}
		}
		seen[s.Name] = true
		if s.Value == "" || strings.ContainsAny(s.Value, "\x00\r\n") {
			return &InvalidError{Reason: fmt.Sprintf("secret %s: its value is empty or holds a NUL or a line end (it goes into a header)", s.Name)}
		}
		if len(s.Hosts) == 0 {
			return &InvalidError{Reason: fmt.Sprintf("secret %s has no host to go to (--secret-host %s=HOST)", s.Name, s.Name)}
		}
		for _, h := range s.Hosts {
			host, port, err := allowlist.SecretHost(h)
			if err != nil {
				return &InvalidError{Reason: fmt.Sprintf("secret %s: %v", s.Name, err)}
			}
			if !pol.Allows(host, port) {
				return &InvalidError{Reason: fmt.Sprintf("secret %s goes to %s port %d, which is not on the allow-list (--allow %s)", s.Name, host, port, h)}
			}
		}
	}
	return nil
}

// AllowSecretHosts adds each secret's hosts to opts' allow-list (naming a
// host to send a secret to is leave to reach it), and so makes the network
// egress when none was asked for. A network of none or full is refused:
// only egress has the proxy that puts secrets in.
func AllowSecretHosts(opts *CreateOptions) error {
	if len(opts.Secrets) == 0 {
		return nil
	}
	switch opts.Network.Mode {
	case NetworkDefault:
		opts.Network.Mode = NetworkEgress
	case NetworkEgress:
	default:
		return &InvalidError{Reason: fmt.Sprintf("secrets go with network egress, not %s: the egress proxy puts them into requests", opts.Network.Mode)}
	}
	for _, s := range opts.Secrets {
		for _, h := range s.Hosts {
			host, port, err := allowlist.SecretHost(h)
			if err != nil {
				return &InvalidError{Reason: fmt.Sprintf("secret %s: %v", s.Name, err)}
			}
			rule := net.JoinHostPort(host, strconv.Itoa(port))
			if !slices.Contains(opts.Network.Allow, rule) {
				opts.Network.Allow = append(opts.Network.Allow, rule)
			}
		}
	}
	return nil
}

// SecretPlaceholders gives each secret a placeholder of its own, new at
// each call (at every start): the secrets as the egress proxy takes them,
// and the neuron's variables, which hold the placeholders.
func SecretPlaceholders(list []Secret) ([]boot.EgressSecret, []string) {
	var out []boot.EgressSecret
	var env []string
	for _, s := range list {
		b := make([]byte, 16)
		rand.Read(b) // never fails (crypto/rand)
		p := "cortex-placeholder-" + hex.EncodeToString(b)
		out = append(out, boot.EgressSecret{Name: s.Name, Placeholder: p, Value: s.Value, Hosts: slices.Clone(s.Hosts)})
		env = append(env, s.Name+"="+p)
	}
	return out, env
}

// UpstreamCAs reads the authorities the egress proxy checks the servers
// of a neuron's secrets against besides the host's roots (the operator's
// egress.upstream_ca file, path; "": none).
func UpstreamCAs(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("egress.upstream_ca: %w", err)
	}
	return string(b), nil
}
