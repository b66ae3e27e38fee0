package allowlist

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// SecretHost reads where a secret may be sent: "host" or "host:port"
// (port 443 when none is given), a host name or an address, no wildcard.
// It returns the host in canonical form (lower case, no final dot; an
// address as netip writes it).
func SecretHost(s string) (host string, port int, err error) {
	host, port = s, 443
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("secret host %q: the port is not 1-65535", s)
		}
		host, port = h, n
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return CanonicalHost(host), port, nil
	}
	host = CanonicalHost(host)
	if strings.Contains(host, "*") || CheckHostName(host) != nil {
		return "", 0, fmt.Errorf("secret host %q: want a host name or address, and a port if not 443 (no wildcards)", s)
	}
	return host, port, nil
}

// Allows reports whether the list lets a neuron reach host:port: by a name
// rule, or, for an address, an address rule.
func (p *List) Allows(host string, port int) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		_, ok := p.AddrAllowed(a, port)
		return ok
	}
	_, ok := p.NameAllowed(host, port)
	return ok
}

// CanonicalHost is host as secrets name it: an address unmapped, a name in
// lower case without a final dot. Every spelling of a host is one host.
func CanonicalHost(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}
