package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a name server on loopback speaking real DNS over UDP and
// TCP. Answers over UDP are truncated when truncateUDP is set.
type dnsServer struct {
	addr        netip.AddrPort
	records     map[string][]netip.Addr // name (with the final dot) to addresses
	truncateUDP atomic.Bool
	queries     atomic.Int32
}

func startDNS(t *testing.T, records map[string][]netip.Addr) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	ln, err := net.Listen("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String())
	if err != nil {
		pc.Close()
		t.Skipf("the TCP port of the test name server is taken: %v", err)
	}
	s := &dnsServer{addr: netip.MustParseAddrPort(pc.LocalAddr().String()), records: records}
	done := make(chan struct{}, 2)
	t.Cleanup(func() { pc.Close(); ln.Close(); <-done; <-done })
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(s.answer(buf[:n], s.truncateUDP.Load()), from)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var lb [2]byte
			if _, err := io.ReadFull(c, lb[:]); err == nil {
				q := make([]byte, binary.BigEndian.Uint16(lb[:]))
				if _, err := io.ReadFull(c, q); err == nil {
					a := s.answer(q, false)
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(a))), a...))
				}
			}
			c.Close()
		}
	}()
	return s
}

func (s *dnsServer) answer(q []byte, truncate bool) []byte {
	s.queries.Add(1)
	var msg dnsmessage.Message
	if err := msg.Unpack(q); err != nil || len(msg.Questions) != 1 {
		return nil
	}
	question := msg.Questions[0]
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: msg.ID, Response: true, RecursionAvailable: true},
		Questions: msg.Questions}
	addrs, ok := s.records[strings.ToLower(question.Name.String())]
	switch {
	case !ok:
		resp.RCode = dnsmessage.RCodeNameError
	case truncate:
		resp.Truncated = true
	default:
		// A CNAME first, as recursive servers answer.
		resp.Answers = append(resp.Answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET},
			Body:   &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("edge.cdn.test.")}})
		for _, a := range addrs {
			h := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("edge.cdn.test."), Class: dnsmessage.ClassINET}
			switch {
			case a.Is4() && question.Type == dnsmessage.TypeA:
				h.Type = dnsmessage.TypeA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.AResource{A: a.As4()}})
			case a.Is6() && question.Type == dnsmessage.TypeAAAA:
				h.Type = dnsmessage.TypeAAAA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
	}
	b, _ := resp.Pack()
	return b
}

func TestResolverDNS(t *testing.T) {
	want := []netip.Addr{netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("2001:db8::5")}
	srv := startDNS(t, map[string][]netip.Addr{"pkg.example.": want})
	r := NewResolver(nil, []netip.AddrPort{srv.addr})
	ctx := context.Background()
	got, err := r.Resolve(ctx, "PKG.example.")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v %v, want %v", got, err, want)
	}
	if _, err := r.Resolve(ctx, "missing.example"); !errors.Is(err, errNoSuchHost) {
		t.Fatalf("Resolve(missing) = %v, want no such host", err)
	}
	srv.truncateUDP.Store(true)
	got, err = r.Resolve(ctx, "pkg.example")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Resolve over TCP after truncation = %v %v", got, err)
	}
}

func TestResolverFallsBackToTheNextServer(t *testing.T) {
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close() // answers nothing
	srv := startDNS(t, map[string][]netip.Addr{"a.example.": {netip.MustParseAddr("203.0.113.9")}})
	r := NewResolver(nil, []netip.AddrPort{netip.MustParseAddrPort(dead.LocalAddr().String()), srv.addr})
	r.Timeout = 200 * time.Millisecond
	got, err := r.Resolve(context.Background(), "a.example")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("203.0.113.9") {
		t.Fatalf("Resolve = %v %v", got, err)
	}
}

func TestSystemResolverReadsOnce(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	conf := filepath.Join(dir, "resolv.conf")
	os.WriteFile(hosts, []byte("# comment\n127.0.0.1 localhost\n::1 localhost ip6-localhost\n10.0.0.7 db.internal db # the database\nbogus line\n"), 0o644)
	os.WriteFile(conf, []byte("search example\nnameserver 192.0.2.53\nnameserver ::1\noptions ndots:1\n"), 0o644)
	r, err := SystemResolver(hosts, conf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.servers, []netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("[::1]:53")}) {
		t.Errorf("servers = %v", r.servers)
	}
	// The neuron may rewrite these files: the copy must not change.
	os.WriteFile(hosts, []byte("203.0.113.66 db.internal\n"), 0o644)
	got, err := r.Resolve(context.Background(), "db.internal")
	if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("10.0.0.7")}) {
		t.Errorf("Resolve(db.internal) = %v %v", got, err)
	}
	got, _ = r.Resolve(context.Background(), "localhost")
	if !slices.Equal(got, []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}) {
		t.Errorf("Resolve(localhost) = %v", got)
	}
	r, err = SystemResolver(filepath.Join(dir, "none"), filepath.Join(dir, "none"))
	if err != nil || len(r.servers) != 1 || r.servers[0].String() != "127.0.0.1:53" {
		t.Errorf("without files: %v %v", r, err)
	}
}
