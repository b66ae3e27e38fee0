package egressca_test

import (
	"crypto/x509"
	"net"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/egressca"
)

// The authority is a CA that may sign only for its hosts (names and
// addresses, each kind constrained even when it has none), and Parse
// takes it back only with its own key.
func TestAuthority(t *testing.T) {
	cert, key, err := egressca.New([]string{"api.example.com", "10.0.0.7:8443"})
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := egressca.Parse(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsCA || !c.MaxPathLenZero || !c.PermittedDNSDomainsCritical || c.KeyUsage&x509.KeyUsageCertSign == 0 || k == nil {
		t.Errorf("not a constrained CA: %+v", c)
	}
	if len(c.PermittedDNSDomains) != 1 || c.PermittedDNSDomains[0] != "api.example.com" ||
		len(c.PermittedIPRanges) != 1 || !c.PermittedIPRanges[0].IP.Equal(net.ParseIP("10.0.0.7")) {
		t.Errorf("constraints: %v %v", c.PermittedDNSDomains, c.PermittedIPRanges)
	}
	names, _, _ := egressca.New([]string{"api.example.com"})
	if c, err := egressca.ParseCert(names); err != nil || len(c.PermittedIPRanges) != 1 || c.PermittedIPRanges[0].IP.String() != "255.255.255.255" {
		t.Errorf("no address among the hosts: %v %v (want only the unusable 255.255.255.255/32)", c.PermittedIPRanges, err)
	}
	other, otherKey, _ := egressca.New([]string{"api.example.com"})
	if _, _, err := egressca.Parse(cert, otherKey); err == nil {
		t.Error("another authority's key taken")
	}
	if _, _, err := egressca.Parse(other, nil); err == nil {
		t.Error("no key taken")
	}
	if _, err := egressca.ParseCert(append(append([]byte{}, cert...), other...)); err == nil {
		t.Error("two certificates taken as one authority")
	}
	if _, _, err := egressca.New([]string{"*.example.com"}); err == nil {
		t.Error("a wildcard host taken")
	}
}
