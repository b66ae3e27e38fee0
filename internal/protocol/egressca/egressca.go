// Package egressca makes and reads the certificate authority a neuron's
// egress proxy shows the neuron for the hosts its secrets go to. nsbox's
// PID 1 makes one of its own at each start; in kube mode the host makes
// it at the create, since whichever host holds the neuron's tunnel serves
// its proxy, and the neuron trusts one authority for its pod's life.
package egressca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// New makes an authority that may sign only for hosts (each "host" or
// "host:port", as a secret names them): a new P-256 key, and a
// certificate whose name constraints allow those names and addresses
// alone. It returns both PEM-encoded.
func New(hosts []string) (certPEM, keyPEM []byte, err error) {
	var names []string
	var ips []*net.IPNet
	for _, h := range hosts {
		host, _, err := allowlist.SecretHost(h)
		if err != nil {
			return nil, nil, err
		}
		if a, err := netip.ParseAddr(host); err == nil {
			ips = append(ips, &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())})
		} else {
			names = append(names, host)
		}
	}
	// A name constraint of each kind, and an unusable one where there are
	// none of a kind.
	if len(names) == 0 {
		names = []string{"invalid"}
	}
	if len(ips) == 0 {
		ips = []*net.IPNet{{IP: net.IPv4bcast.To4(), Mask: net.CIDRMask(32, 32)}}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                Serial(),
		Subject:                     pkix.Name{CommonName: "nsys-cortex egress (this neuron only)"},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.AddDate(2, 0, 0),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         names,
		PermittedIPRanges:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Parse reads an authority New made: its certificate must be a CA's and
// the key its own.
func Parse(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, nil, errors.New("the egress authority: no PEM EC private key")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("the egress authority's key: %w", err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, errors.New("the egress authority's key is not its certificate's")
	}
	return cert, key, nil
}

// ParseCert reads the certificate of an authority New made (one PEM
// block, a CA's).
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	cb, rest := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("the egress authority: no PEM certificate")
	}
	if more, _ := pem.Decode(rest); more != nil {
		return nil, errors.New("the egress authority: more than one PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the egress authority's certificate: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, errors.New("the egress authority's certificate is not a CA's")
	}
	return cert, nil
}

// Serial is a random certificate serial number.
func Serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
