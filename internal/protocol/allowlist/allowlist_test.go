package allowlist

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct{ in, out string }{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"example.com:443", "example.com:443"},
		{"example.com:*", "example.com"},
		{"*.example.com", "*.example.com"},
		{"*.example.com:8080", "*.example.com:8080"},
		{"pypi_mirror.internal", "pypi_mirror.internal"},
		{"203.0.113.7", "203.0.113.7"},
		{"203.0.113.7:443", "203.0.113.7:443"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"10.0.0.0/8:5432", "10.0.0.0/8:5432"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[2001:db8::/32]:443", "[2001:db8::/32]:443"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{" localhost:8080 ", "localhost:8080"},
	}
	for _, tc := range good {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if r.String() != tc.out {
			t.Errorf("ParseRule(%q) = %s, want %s", tc.in, r, tc.out)
		}
		if again, err := ParseRule(r.String()); err != nil || again != r {
			t.Errorf("ParseRule(%q) does not read back: %v %v", r, again, err)
		}
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"*", "network full"},
		{"*:443", "network full"},
		{"example.com:", "empty port"},
		{"example.com:0", "port"},
		{"example.com:65536", "port"},
		{"example.com:https", "port"},
		{"exa mple.com", "one entry per --allow"},
		{"a.com,b.com", "one entry per --allow"},
		{"exa_mple!.com", "holds"},
		{"foo.*.com", "whole first label"},
		{"*.*", "whole first label"},
		{"*.", "whole first label"},
		{"*.com", "too wide"},
		{"1.2.3", "ends in a number"},
		{"256.1.1.1", "ends in a number"},
		{"12345", "ends in a number"},
		{"0.0.0.0/0", "network full"},
		{"::/0", "network full"},
		{"0.0.0.0/0:443", "network full"},
		{"::1:18080", "in brackets"},
		{"2001:db8::1/64:443", "in brackets"},
		{"-bad.com", "starts or ends"},
		{"a..b", "label"},
		{strings.Repeat("a", 64) + ".com", "1-63"},
		{"[example.com]:80", "only an IPv6"},
		{"[2001:db8::1", "missing ]"},
		{"[2001:db8::1]443", "expected :port"},
		{"10.0.0.0/33", "not a network"},
		{"http://example.com", "not a URL"}, {"example.com/path", "has no path"},
	}
	for _, tc := range bad {
		_, err := ParseRule(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "egress allow-list entry") {
			t.Errorf("ParseRule(%q) = %v, want an error about %q", tc.in, err, tc.why)
		}
	}
}

func TestPolicy(t *testing.T) {
	p, err := Parse([]string{"example.com:443", "*.pkg.dev", "10.0.0.0/8:5432", "127.0.0.1:8080", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	names := []struct {
		host string
		port int
		ok   bool
	}{
		{"example.com", 443, true},
		{"EXAMPLE.com.", 443, true},
		{"example.com", 80, false},
		{"www.example.com", 443, false},
		{"notexample.com", 443, false},
		{"a.pkg.dev", 1, true},
		{"a.b.pkg.dev", 443, true},
		{"pkg.dev", 443, false},
		{"xpkg.dev", 443, false},
		{"10.1.1.1", 5432, false}, // an address is not a name
	}
	for _, tc := range names {
		if _, ok := p.NameAllowed(tc.host, tc.port); ok != tc.ok {
			t.Errorf("NameAllowed(%s, %d) = %v", tc.host, tc.port, ok)
		}
	}
	addrs := []struct {
		addr string
		port int
		ok   bool
	}{
		{"10.9.9.9", 5432, true},
		{"10.9.9.9", 5433, false},
		{"11.0.0.1", 5432, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.2", 8080, false},
		{"::ffff:127.0.0.1", 8080, true},
		{"2001:db8:1::5", 22, true},
		{"2001:db9::5", 22, false},
	}
	for _, tc := range addrs {
		if _, ok := p.AddrAllowed(netip.MustParseAddr(tc.addr), tc.port); ok != tc.ok {
			t.Errorf("AddrAllowed(%s, %d) = %v", tc.addr, tc.port, ok)
		}
	}
	// A wide rule does not reach the special blocks inside it.
	wide, _ := Parse([]string{"0.0.0.0/1", "::/1", "100.0.0.0/6", "127.0.0.0/8:22"})
	for addr, want := range map[string]bool{"8.8.8.8": true, "127.0.0.1": false, "10.1.1.1": false, "::1": false,
		"100.64.0.1": false, "101.0.0.1": true, "::ffff:127.0.0.1": false} {
		if _, ok := wide.AddrAllowed(netip.MustParseAddr(addr), 80); ok != want {
			t.Errorf("wide rules: AddrAllowed(%s, 80) = %v, want %v", addr, ok, want)
		}
	}
	if _, ok := wide.AddrAllowed(netip.MustParseAddr("127.0.0.9"), 22); !ok {
		t.Error("127.0.0.0/8:22 did not reach 127.0.0.9:22")
	}
	var zero List
	if _, ok := zero.NameAllowed("example.com", 443); ok {
		t.Error("the zero policy allowed a name")
	}
	if _, err := Parse([]string{"ok.com", "bad name"}); err == nil || !strings.Contains(err.Error(), `"bad name"`) {
		t.Errorf("Parse with a bad entry: %v", err)
	}
}

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1:248:1893:25c8:1946": true, "203.0.113.5": true,
		"127.0.0.1": false, "127.8.8.8": false, "::1": false, "::ffff:127.0.0.1": false,
		"10.0.0.1": false, "172.16.0.1": false, "192.168.1.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "0.1.2.3": false, "224.0.0.1": false,
		"255.255.255.255": false, "fe80::1": false, "fc00::1": false, "::": false,
		"64:ff9b::7f00:1": false, "2002:7f00:1::": false, "2001::1": false, "fec0::1": false, "192.88.99.1": false,
		"::7f00:1": false, "100::1": false, "2001:db8::1": true, "2001:4860::8888": true,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}
