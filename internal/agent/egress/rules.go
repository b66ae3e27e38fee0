package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allow-list entry: a name rule (Name, maybe Wildcard) or an
// address rule (Prefix), with a port (0: any).
type Rule struct {
	// Name is a lower-case host name without a trailing dot. With
	// Wildcard it matches the names under it ("*.example.com" matches
	// "a.example.com" and "a.b.example.com", not "example.com").
	Name     string
	Wildcard bool
	// Prefix, when valid, makes this an address rule: an address or CIDR.
	Prefix netip.Prefix
	// Port is the one port allowed; 0 allows every port.
	Port int
}

// String gives the rule back in the syntax ParseRule reads.
func (r Rule) String() string {
	var host string
	switch {
	case r.Prefix.IsValid():
		host = r.Prefix.String()
		if r.Prefix.IsSingleIP() {
			host = r.Prefix.Addr().String()
		}
		if r.Prefix.Addr().Is6() && r.Port != 0 {
			host = "[" + host + "]"
		}
	case r.Wildcard:
		host = "*." + r.Name
	default:
		host = r.Name
	}
	if r.Port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(r.Port)
}

// Policy is a parsed allow-list. The zero Policy allows nothing.
type Policy struct {
	rules []Rule
}

// Parse reads an allow-list; an error names the first bad entry.
func Parse(entries []string) (*Policy, error) {
	p := &Policy{}
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

// Rules returns the policy's rules in the order given.
func (p *Policy) Rules() []Rule { return append([]Rule(nil), p.rules...) }

// ParseRule reads one allow-list entry:
//
//	example.com            the name, any port
//	example.com:443        the name, port 443
//	*.example.com[:port]   every name under example.com
//	203.0.113.7[:port]     one address
//	10.0.0.0/8[:port]      an IPv4 network
//	2001:db8::/32          an IPv6 network, any port
//	[2001:db8::1]:443      an IPv6 address (or network) with a port
//
// A port is a number from 1 to 65535 or "*" (any).
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("egress allow-list entry %q: %s", s, why)
	}
	in := strings.TrimSpace(s)
	if in == "" {
		return bad("empty")
	}
	if in == "*" || strings.HasPrefix(in, "*:") {
		return bad("allowing every host is network full, not egress")
	}
	if strings.Contains(in, "://") {
		return bad("write a host name, address or network, not a URL")
	}
	// An address or network with no port: a bare IPv6 one holds colons.
	if r, ok := parsePrefix(in); ok {
		return r, nil
	}
	host, port := in, ""
	if strings.HasPrefix(in, "[") {
		end := strings.Index(in, "]")
		if end < 0 {
			return bad("missing ]")
		}
		host, port = in[1:end], in[end+1:]
		if port != "" {
			if !strings.HasPrefix(port, ":") {
				return bad("expected :port after ]")
			}
			port = port[1:]
			if port == "" {
				return bad("empty port")
			}
		}
		if _, ok := parsePrefix(host); !ok {
			return bad("only an IPv6 address or network goes in brackets")
		}
	} else if i := strings.LastIndex(in, ":"); i >= 0 {
		host, port = in[:i], in[i+1:]
		if port == "" {
			return bad("empty port")
		}
	}
	r, ok := parsePrefix(host)
	if !ok {
		var err error
		if r, err = parseName(host); err != nil {
			return bad(err.Error())
		}
	}
	if port != "" && port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return bad(fmt.Sprintf("port %q: want 1-65535 or *", port))
		}
		r.Port = n
	}
	return r, nil
}

func parsePrefix(s string) (Rule, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return Rule{Prefix: netip.PrefixFrom(a, a.BitLen())}, true
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			a := p.Addr().Unmap()
			if p.Bits() < 96 {
				return Rule{}, false
			}
			p = netip.PrefixFrom(a, p.Bits()-96)
		}
		return Rule{Prefix: p.Masked()}, true
	}
	return Rule{}, false
}

// parseName checks a host name (maybe "*.") as DNS would take it.
func parseName(s string) (Rule, error) {
	var r Rule
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Wildcard, name = true, rest
	}
	if name == "" {
		return r, fmt.Errorf("no host name")
	}
	if len(name) > 253 {
		return r, fmt.Errorf("host name longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return r, fmt.Errorf("host name label %q: want 1-63 characters", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return r, fmt.Errorf("a wildcard goes only at the start, as *.domain")
				}
				return r, fmt.Errorf("host name holds %q", c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return r, fmt.Errorf("host name label %q starts or ends with '-'", label)
		}
	}
	r.Name = name
	return r, nil
}

// NameAllowed reports whether a name rule allows host on port, and which.
func (p *Policy) NameAllowed(host string, port int) (Rule, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, r := range p.rules {
		if r.Prefix.IsValid() || (r.Port != 0 && r.Port != port) {
			continue
		}
		if r.Wildcard && strings.HasSuffix(host, "."+r.Name) || !r.Wildcard && host == r.Name {
			return r, true
		}
	}
	return Rule{}, false
}

// AddrAllowed reports whether an address rule allows a on port, and which.
func (p *Policy) AddrAllowed(a netip.Addr, port int) (Rule, bool) {
	a = a.Unmap()
	for _, r := range p.rules {
		if r.Prefix.IsValid() && r.Prefix.Contains(a) && (r.Port == 0 || r.Port == port) {
			return r, true
		}
	}
	return Rule{}, false
}

// HasNameRules reports whether any rule is a name rule.
func (p *Policy) HasNameRules() bool {
	for _, r := range p.rules {
		if !r.Prefix.IsValid() {
			return true
		}
	}
	return false
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64: may embed any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"), // 6to4: likewise
}

// Public reports whether a is an ordinary Internet address: not loopback,
// private, link-local, multicast, carrier-grade NAT or otherwise special.
// A name rule reaches only public addresses; anything else needs an address
// rule, so that a name whose DNS someone else controls cannot be pointed at
// the host's loopback or the local network.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
