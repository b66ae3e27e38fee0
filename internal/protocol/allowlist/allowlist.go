package allowlist

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

// List is a parsed allow-list. The zero List allows nothing.
type List struct {
	rules []Rule
}

// Parse reads an allow-list; an error names the first bad entry.
func Parse(entries []string) (*List, error) {
	p := &List{}
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

// ParseRule reads one allow-list entry:
//
//	example.com            the name, any port
//	example.com:443        the name, port 443
//	*.example.com[:port]   every name under example.com (not example.com)
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
	switch {
	case in == "":
		return bad("empty")
	case in == "*" || strings.HasPrefix(in, "*:"):
		return bad("allowing every host is network full, not egress")
	case strings.Contains(in, "://"):
		return bad("write a host name, address or network, not a URL")
	case strings.ContainsAny(in, ", "):
		return bad("one entry per --allow")
	}
	// An address or network with no port: a bare IPv6 one holds colons.
	if r, ok := parsePrefix(in); ok {
		return checkPrefix(r, bad)
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
		if r, ok := parsePrefix(host); !ok || !r.Prefix.Addr().Is6() {
			return bad("only an IPv6 address or network goes in brackets")
		}
	} else if i := strings.LastIndex(in, ":"); i >= 0 {
		host, port = in[:i], in[i+1:]
		if strings.Contains(host, ":") {
			return bad("an IPv6 address with a port goes in brackets, as [2001:db8::1]:443")
		}
		if port == "" {
			return bad("empty port")
		}
	}
	r, ok := parsePrefix(host)
	if ok {
		if _, err := checkPrefix(r, bad); err != nil {
			return Rule{}, err
		}
	} else {
		if before, _, ok := strings.Cut(host, "/"); ok {
			if _, err := netip.ParseAddr(before); err == nil {
				return bad("not a network: want an address and a prefix length, as 10.0.0.0/8 or 2001:db8::/32")
			}
			return bad("a host name has no path")
		}
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

// checkPrefix refuses a network of every address.
func checkPrefix(r Rule, bad func(string) (Rule, error)) (Rule, error) {
	if r.Prefix.Bits() == 0 {
		return bad("every address is network full, not egress")
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
					return r, fmt.Errorf("a '*' is only ever the whole first label, as in *.example.com")
				}
				return r, fmt.Errorf("host name holds %q", c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return r, fmt.Errorf("host name label %q starts or ends with '-'", label)
		}
	}
	labels := strings.Split(name, ".")
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return r, fmt.Errorf("not an address, and no host name ends in a number")
	}
	if r.Wildcard && len(labels) < 2 {
		return r, fmt.Errorf("a wildcard over a whole top-level domain is too wide: name a domain under it")
	}
	r.Name = name
	return r, nil
}

// NameAllowed reports whether a name rule allows host on port, and which.
func (p *List) NameAllowed(host string, port int) (Rule, bool) {
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
// An address that is not public (see Public) is reached only by a rule
// inside its own special block: 127.0.0.1:8080 or 10.0.0.0/8 reach what
// they say, but a wide rule like 0.0.0.0/1 does not reach the host's
// loopback or the local network.
func (p *List) AddrAllowed(a netip.Addr, port int) (Rule, bool) {
	a = a.Unmap()
	block, special := specialBlock(a)
	for _, r := range p.rules {
		if !r.Prefix.IsValid() || !r.Prefix.Contains(a) || (r.Port != 0 && r.Port != port) {
			continue
		}
		if special && (r.Prefix.Bits() < block.Bits() || !block.Contains(r.Prefix.Addr())) {
			continue
		}
		return r, true
	}
	return Rule{}, false
}

// specialBlocks are the address blocks that are not the Internet: this
// host, the local networks, and ranges that stand for other addresses.
var specialBlocks = func() []netip.Prefix {
	var out []netip.Prefix
	for _, b := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
		"192.88.99.0/24", // 6to4 relays
		"::/128", "::1/128", "::/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/32", "2002::/16",
		"fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(b))
	}
	return out
}()

// specialBlock returns the special block a is in, if any.
func specialBlock(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap()
	for _, b := range specialBlocks {
		if b.Contains(a) {
			return b, true
		}
	}
	return netip.Prefix{}, false
}

// Public reports whether a is an ordinary Internet address: not loopback,
// private, link-local or site-local, multicast, carrier-grade NAT,
// reserved or discard, or a translation range (NAT64, 6to4, Teredo,
// IPv4-compatible) that may stand for any of those. A name
// rule reaches only public addresses; anything else needs an address rule,
// so that a name whose DNS someone else controls cannot be pointed at the
// host's loopback or the local network. (The documentation ranges, such as
// 203.0.113.0/24, count as public: nothing special is reached through them,
// and test networks use them.)
func Public(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	_, special := specialBlock(a)
	return !special
}

// CheckHostName reports whether s is a host name as a name rule's is read
// (DNS syntax, at most a trailing dot), not a wildcard: what a destination
// named in a request must be before it is logged or looked up.
func CheckHostName(s string) error {
	if strings.HasPrefix(s, "*") {
		return fmt.Errorf("a destination is a host name, not a wildcard")
	}
	_, err := parseName(s)
	return err
}
