package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver looks names up the way the host does (its hosts file, then its
// name servers), from a copy taken when it was made. It never reads files
// later: the proxy runs inside the neuron's mount namespace, where the
// neuron may rewrite /etc/hosts and /etc/resolv.conf, and Go's own resolver
// would follow them.
type Resolver struct {
	hosts   map[string][]netip.Addr
	servers []netip.AddrPort
	// Timeout bounds one query to one server.
	Timeout time.Duration
}

// SystemResolver reads the host's hosts file and resolv.conf now.
func SystemResolver(hostsPath, resolvConfPath string) (*Resolver, error) {
	r := &Resolver{hosts: map[string][]netip.Addr{}, Timeout: 5 * time.Second}
	if b, err := os.ReadFile(hostsPath); err == nil {
		r.hosts = parseHosts(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("network: reading %s: %w", hostsPath, err)
	}
	if b, err := os.ReadFile(resolvConfPath); err == nil {
		r.servers = parseResolvConf(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("network: reading %s: %w", resolvConfPath, err)
	}
	if len(r.servers) == 0 {
		// What the C library does when resolv.conf names none.
		r.servers = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")}
	}
	return r, nil
}

// NewResolver makes a resolver with the given hosts entries and servers.
func NewResolver(hosts map[string][]netip.Addr, servers []netip.AddrPort) *Resolver {
	h := map[string][]netip.Addr{}
	for name, addrs := range hosts {
		h[strings.ToLower(name)] = addrs
	}
	return &Resolver{hosts: h, servers: servers, Timeout: 5 * time.Second}
}

func parseHosts(b []byte) map[string][]netip.Addr {
	hosts := map[string][]netip.Addr{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil || a.Zone() != "" {
			continue
		}
		for _, name := range f[1:] {
			name = strings.ToLower(strings.TrimSuffix(name, "."))
			hosts[name] = append(hosts[name], a.Unmap())
		}
	}
	return hosts
}

func parseResolvConf(b []byte) []netip.AddrPort {
	var servers []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil {
			servers = append(servers, netip.AddrPortFrom(a.Unmap(), 53))
		}
	}
	return servers
}

// Resolve returns the addresses of name, IPv4 first.
func (r *Resolver) Resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if addrs, ok := r.hosts[name]; ok {
		return addrs, nil
	}
	fqdn, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", name, err)
	}
	var lastErr error
	for _, srv := range r.servers {
		addrs, err := r.lookup(ctx, srv, fqdn)
		switch {
		case err == nil && len(addrs) == 0:
			return nil, fmt.Errorf("resolving %s: %w", name, errNoAddress)
		case err == nil:
			return addrs, nil
		case errors.Is(err, errNoSuchHost):
			return nil, fmt.Errorf("resolving %s: %w", name, err)
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("resolving %s: %w", name, lastErr)
}

// lookup asks one server for the A and then the AAAA records of name. A
// failed AAAA query after a good A answer is not an error: some servers
// mishandle AAAA.
func (r *Resolver) lookup(ctx context.Context, srv netip.AddrPort, name dnsmessage.Name) ([]netip.Addr, error) {
	addrs, err := r.query(ctx, srv, name, dnsmessage.TypeA)
	if err != nil {
		return nil, err
	}
	if v6, err := r.query(ctx, srv, name, dnsmessage.TypeAAAA); err == nil {
		addrs = append(addrs, v6...)
	} else if len(addrs) == 0 {
		return nil, err
	}
	return addrs, nil
}

// errNoSuchHost and errNoAddress are definite answers: the name does not
// exist, or has no address.
var (
	errNoSuchHost = errors.New("no such host")
	errNoAddress  = errors.New("no address")
)

// query asks one server for one record type: over UDP, and again over TCP
// when the answer was truncated.
func (r *Resolver) query(ctx context.Context, srv netip.AddrPort, name dnsmessage.Name, t dnsmessage.Type) ([]netip.Addr, error) {
	var idb [2]byte
	rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: name, Type: t, Class: dnsmessage.ClassINET}},
	}
	q, err := msg.Pack()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	ans, err := exchange(ctx, "udp", srv, q)
	if err != nil {
		return nil, err
	}
	addrs, truncated, err := parseAnswer(ans, id, name, t)
	if truncated {
		if ans, err = exchange(ctx, "tcp", srv, q); err != nil {
			return nil, err
		}
		addrs, _, err = parseAnswer(ans, id, name, t)
	}
	return addrs, err
}

func exchange(ctx context.Context, network string, srv netip.AddrPort, q []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, srv.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if network == "udp" {
		if _, err := c.Write(q); err != nil {
			return nil, err
		}
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	framed := binary.BigEndian.AppendUint16(nil, uint16(len(q)))
	if _, err := c.Write(append(framed, q...)); err != nil {
		return nil, err
	}
	var lb [2]byte
	if _, err := io.ReadFull(c, lb[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint16(lb[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// parseAnswer takes the A or AAAA records out of a response to question
// (id, name, t). The server is the host's own resolver, trusted with the
// whole CNAME chain it returns.
func parseAnswer(b []byte, id uint16, name dnsmessage.Name, t dnsmessage.Type) ([]netip.Addr, bool, error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil {
		return nil, false, fmt.Errorf("bad DNS answer: %w", err)
	}
	if h.ID != id || !h.Response {
		return nil, false, errors.New("bad DNS answer: not a response to the question")
	}
	q, err := p.Question()
	if err != nil || !strings.EqualFold(q.Name.String(), name.String()) || q.Type != t {
		return nil, false, errors.New("bad DNS answer: not a response to the question")
	}
	if h.Truncated {
		return nil, true, nil
	}
	switch h.RCode {
	case dnsmessage.RCodeSuccess:
	case dnsmessage.RCodeNameError:
		return nil, false, errNoSuchHost
	default:
		return nil, false, fmt.Errorf("DNS server answered %v", h.RCode)
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, false, err
	}
	var addrs []netip.Addr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return addrs, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("bad DNS answer: %w", err)
		}
		switch {
		case rh.Type == dnsmessage.TypeA && t == dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return nil, false, err
			}
			addrs = append(addrs, netip.AddrFrom4(r.A))
		case rh.Type == dnsmessage.TypeAAAA && t == dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return nil, false, err
			}
			addrs = append(addrs, netip.AddrFrom16(r.AAAA).Unmap())
		default:
			if err := p.SkipAnswer(); err != nil {
				return nil, false, err
			}
		}
	}
}
