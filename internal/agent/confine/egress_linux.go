package confine

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// EgressPlan is what it takes to enforce a neuron's allow-list, made
// before anything of the neuron's runs: the host's resolver files are read
// while this process still sees the host's /etc, never again. nsbox's PID 1
// makes one before it builds the root; the host's end of a VM's egress
// tunnel (EgressTunnel) before it gives up root.
type EgressPlan struct {
	policy   *allowlist.List
	resolver *egress.Resolver
	secrets  *egress.Secrets
	bundle   []byte // the host's roots and the secrets' authority, PEM
}

// hostBundles are where hosts keep their roots as one PEM file.
var hostBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem"}

// maxBundle bounds a host's root bundle.
const maxBundle = 8 << 20

// HostBundle is this system's roots as one PEM file (the first of
// hostBundles there is, and a line end), or nil.
func HostBundle() []byte {
	for _, p := range hostBundles {
		if b, err := readBounded(p, maxBundle); err == nil {
			return append(b, '\n')
		}
	}
	return nil
}

// WithSecrets adds secrets to the plan (egress.Secrets): the host's roots,
// and upstreamCAs (PEM), check the secrets' servers; the host's bundle and
// the new authority make the bundle the neuron trusts. Like the resolver
// files, the host's roots are read now, while this process still sees the
// host's /etc.
func (plan *EgressPlan) WithSecrets(list []boot.EgressSecret, upstreamCAs string) error {
	if err := plan.withSecrets(list, upstreamCAs, nil, nil); err != nil {
		return err
	}
	plan.bundle = append(HostBundle(), plan.secrets.CAPEM()...)
	return nil
}

// WithTunnelSecrets adds the secrets a host handed the host's end of an
// egress tunnel, with the authority the host made for them (the one the
// neuron trusts), to the plan. The neuron's trust files are not this
// process's to write: no bundle is made (the host's roots are not read
// for it).
func (plan *EgressPlan) WithTunnelSecrets(s boot.EgressTunnelSecrets) error {
	if s.CACert == "" || s.CAKey == "" {
		return errors.New("secrets: no authority to sign their hosts with")
	}
	return plan.withSecrets(s.Secrets, s.UpstreamCAs, []byte(s.CACert), []byte(s.CAKey))
}

// withSecrets adds list to the plan, signed for with the authority
// certPEM and keyPEM, or with a new one where they are nil.
func (plan *EgressPlan) withSecrets(list []boot.EgressSecret, upstreamCAs string, certPEM, keyPEM []byte) error {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if upstreamCAs != "" && !roots.AppendCertsFromPEM([]byte(upstreamCAs)) {
		return fmt.Errorf("secrets: the upstream authorities hold no PEM certificate")
	}
	var secrets []egress.Secret
	for _, s := range list {
		for _, h := range s.Hosts {
			host, port, err := allowlist.SecretHost(h)
			if err != nil {
				return fmt.Errorf("secrets: %s: %w", s.Name, err)
			}
			if !plan.policy.Allows(host, port) {
				return fmt.Errorf("secrets: %s: %s port %d is not on the allow-list", s.Name, host, port)
			}
		}
		secrets = append(secrets, egress.Secret{Name: s.Name, Placeholder: s.Placeholder, Value: s.Value, Hosts: s.Hosts})
	}
	if certPEM == nil {
		plan.secrets, err = egress.NewSecrets(secrets, roots)
	} else {
		plan.secrets, err = egress.NewSecretsWith(secrets, roots, certPEM, keyPEM)
	}
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	return nil
}

// CA returns the secrets' authority and the bundle the neuron trusts, PEM
// (nil, nil without secrets).
func (plan *EgressPlan) CA() (ca, bundle []byte) {
	if plan.secrets == nil {
		return nil, nil
	}
	return plan.secrets.CAPEM(), plan.bundle
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, err
}

// PlanEgress parses allow and reads the host's resolver files.
func PlanEgress(allow []string) (*EgressPlan, error) {
	pol, err := allowlist.Parse(allow)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	res, err := egress.SystemResolver("/etc/hosts", "/etc/resolv.conf")
	if err != nil {
		return nil, err
	}
	return &EgressPlan{policy: pol, resolver: res}, nil
}

// Proxy is the enforcing proxy of the plan, dialling from this process's
// network namespace, its decisions logged at a bounded rate.
func (plan *EgressPlan) Proxy(logf func(string, ...any)) *egress.Proxy {
	var d net.Dialer
	log := &rateLog{logf: logf, rate: decisionLogRate, burst: decisionLogBurst}
	return &egress.Proxy{Policy: plan.policy, Resolve: plan.resolver.Resolve, Dial: d.DialContext, Secrets: plan.secrets,
		HostAddrs: hostAddrs, Log: func(dec egress.Decision) { log.print(dec.String()) }}
}

// hostAddrs lists the addresses of this host's interfaces (this process is
// in the host's network namespace).
func hostAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs() // none known: only the special blocks are refused
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// The proxy's decisions go to the neuron's log on the host at most at this
// rate (bytes a second, with a burst): the neuron makes the requests, and
// must not be able to fill the host's disk with their log lines.
const (
	decisionLogRate  = 16 << 10
	decisionLogBurst = 1 << 20
)

// rateLog writes lines within a byte budget that refills at rate, and says
// how many it left out once it can write again.
type rateLog struct {
	logf        func(string, ...any)
	rate, burst float64
	now         func() time.Time // time.Now when nil
	mu          sync.Mutex
	tokens      float64
	last        time.Time
	dropped     int
}

func (l *rateLog) print(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	if l.last.IsZero() {
		l.tokens = l.burst
	} else {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < float64(len(line)) {
		l.dropped++
		return
	}
	l.tokens -= float64(len(line))
	if l.dropped > 0 {
		l.logf("egress: %d decisions not logged (over %d KiB/s)", l.dropped, int(l.rate)>>10)
		l.dropped = 0
	}
	l.logf("%s", line)
}
