package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// HTTP/1.1 between the neuron's client and a secret's server, as far as
// the proxy needs it to put secrets in: each message's head is parsed and
// written again, and its body is framed by the proxy's own reading of it
// (RFC 9112, section 6), never passed on with framing the two ends could
// read differently. The agent stays without net/http (TestAgentStaysSmall).

// maxChunkLine bounds a chunk's size line and each trailer line.
const maxChunkLine = 4 << 10

// maxBody bounds one body's declared length.
const maxBody = 1 << 50

// request is one request's head as the client sent it.
type request struct {
	method, target string
	header         textproto.MIMEHeader
	chunked        bool
	length         int64 // the body's, when not chunked
	expect         bool  // Expect: 100-continue
	close          bool  // the client ends the connection after this one
	upgrade        string
}

// hopByHopHeaders are the proxy's hop-by-hop headers and those of a
// message's framing, which writeHead writes again from its own reading.
var hopByHopHeaders = append(slices.Clone(hopByHop), "Transfer-Encoding", "Content-Length", "Expect")

// readRequest reads a request's head. Only origin-form targets are taken
// (the server is the CONNECT's), and the body's framing must be one that
// cannot be read two ways: chunked alone, or one Content-Length.
func readRequest(br *bufio.Reader) (*request, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	method, target, proto, ok := splitRequestLine(line)
	if !ok || !validToken(method) || proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return nil, errors.New("malformed request line")
	}
	if !strings.HasPrefix(target, "/") && !(method == "OPTIONS" && target == "*") {
		return nil, fmt.Errorf("request target %.64q: through a tunnel, a path", target)
	}
	if strings.ContainsAny(target, " \t\r\n\x00") {
		return nil, errors.New("malformed request target")
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, errors.New("malformed request head")
	}
	r := &request{method: method, target: target, header: h}
	if r.chunked, r.length, err = framing(h); err != nil {
		return nil, err
	}
	if r.length < 0 {
		r.length = 0 // a request without framing has no body
	}
	conn := connectionTokens(h)
	r.close = slices.Contains(conn, "close") || proto == "HTTP/1.0" && !slices.Contains(conn, "keep-alive")
	if up := h.Get("Upgrade"); up != "" && slices.Contains(conn, "upgrade") {
		r.upgrade = up
	}
	if e := h.Values("Expect"); len(e) > 0 {
		if len(e) != 1 || !strings.EqualFold(strings.TrimSpace(e[0]), "100-continue") {
			return nil, errors.New("an Expect other than 100-continue")
		}
		r.expect = true
	}
	return r, nil
}

// framing reads how a message's body is delimited: chunked, or length
// (-1: neither was given).
func framing(h textproto.MIMEHeader) (chunked bool, length int64, err error) {
	te, cl := h.Values("Transfer-Encoding"), h.Values("Content-Length")
	switch {
	case len(te) > 0 && len(cl) > 0:
		return false, 0, errors.New("both Transfer-Encoding and Content-Length")
	case len(te) > 1 || len(te) == 1 && !strings.EqualFold(strings.TrimSpace(te[0]), "chunked"):
		return false, 0, errors.New("a transfer coding other than chunked")
	case len(te) == 1:
		return true, 0, nil
	case len(cl) > 1:
		return false, 0, errors.New("more than one Content-Length")
	case len(cl) == 1:
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 || n > maxBody || cl[0] == "" || cl[0][0] == '+' {
			return false, 0, fmt.Errorf("Content-Length %.32q", cl[0])
		}
		return false, n, nil
	}
	return false, -1, nil
}

// connectionTokens lists the Connection header's options, lower case.
func connectionTokens(h textproto.MIMEHeader) []string {
	var out []string
	for _, v := range h.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			out = append(out, strings.ToLower(strings.TrimSpace(t)))
		}
	}
	return out
}

func validToken(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return s != ""
}

// writeHead writes line and h, without hop-by-hop headers and those the
// Connection header names, then extra ("Name: value" lines).
func writeHead(w *bufio.Writer, line string, h textproto.MIMEHeader, extra ...string) {
	drop := connectionTokens(h)
	names := make([]string, 0, len(h))
	for name := range h {
		if !slices.Contains(hopByHopHeaders, name) && !slices.Contains(drop, strings.ToLower(name)) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	w.WriteString(line + "\r\n")
	for _, name := range names {
		for _, v := range h[name] {
			w.WriteString(name + ": " + v + "\r\n")
		}
	}
	for _, e := range extra {
		w.WriteString(e + "\r\n")
	}
	w.WriteString("\r\n")
}

// framingHeaders are the headers that say how a body is framed.
func framingHeaders(chunked bool, length int64) []string {
	switch {
	case chunked:
		return []string{"Transfer-Encoding: chunked"}
	case length >= 0:
		return []string{"Content-Length: " + strconv.FormatInt(length, 10)}
	}
	return nil
}

// writeTo sends the request and its body, read from body, to the server.
func (r *request) writeTo(w *bufio.Writer, body *bufio.Reader, n *atomic.Int64) error {
	extra := framingHeaders(r.chunked, r.length)
	if r.upgrade != "" {
		extra = append(extra, "Connection: Upgrade", "Upgrade: "+r.upgrade)
	} else if r.close {
		extra = append(extra, "Connection: close")
	}
	writeHead(w, r.method+" "+r.target+" HTTP/1.1", r.header, extra...)
	if err := copyBody(w, flushing{w}, body, r.chunked, r.length, n); err != nil {
		return err
	}
	return w.Flush()
}

// bodyWriter takes a body's bytes; Flush passes on what it holds.
type bodyWriter interface {
	io.Writer
	Flush() error
}

// copyBody copies one body: length bytes, or chunks, which are framed
// again as they are read (trailers are dropped). The framing goes to w,
// the bytes of the body through data, which is flushed at the end of
// each chunk and of the body.
func copyBody(w *bufio.Writer, data bodyWriter, r *bufio.Reader, chunked bool, length int64, n *atomic.Int64) error {
	if !chunked {
		k, err := io.CopyN(data, r, length)
		n.Add(k)
		if err == nil {
			err = data.Flush()
		}
		return err
	}
	for {
		line, err := readChunkLine(r)
		if err != nil {
			return err
		}
		sz, _, _ := strings.Cut(line, ";")
		size, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		if err != nil || size < 0 || size > maxBody || strings.TrimSpace(sz) == "" || sz[0] == '+' || sz[0] == '-' {
			return fmt.Errorf("chunk size %.32q", line)
		}
		if size == 0 {
			for { // trailers, dropped
				t, err := readChunkLine(r)
				if err != nil {
					return err
				}
				if t == "" {
					break
				}
			}
			_, err := w.WriteString("0\r\n\r\n")
			return err
		}
		fmt.Fprintf(w, "%x\r\n", size)
		k, err := io.CopyN(data, r, size)
		n.Add(k)
		if err == nil {
			err = data.Flush()
		}
		if err != nil {
			return err
		}
		if end, err := readChunkLine(r); err != nil || end != "" {
			return errors.New("a chunk longer than its size")
		}
		w.WriteString("\r\n")
		if err := w.Flush(); err != nil { // a stream's events go as they come
			return err
		}
	}
}

// readChunkLine reads one CRLF-ended line of at most maxChunkLine bytes.
func readChunkLine(r *bufio.Reader) (string, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxChunkLine {
			return "", errors.New("a chunk line too long")
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return "", err
		}
		break
	}
	s := string(line)
	if !strings.HasSuffix(s, "\r\n") {
		return "", errors.New("a chunk line without CRLF")
	}
	return s[:len(s)-2], nil
}

// relayResponse reads the server's answer to req and writes it to the
// client, framed again: informational answers first, then the final one.
// more says whether the connection may carry another request; upgraded,
// that the server switched protocols (the two are then spliced).
// The server's words pass through sc, which masks the secrets' values
// in them (a server that quotes the request would show them).
func relayResponse(w *bufio.Writer, r *bufio.Reader, lim *headLimit, req *request, sc *scrubber, n *atomic.Int64) (more, upgraded bool, err error) {
	for {
		lim.n = maxRequestHead
		tp := textproto.NewReader(r)
		line, err := tp.ReadLine()
		if err != nil {
			return false, false, err
		}
		h, err := tp.ReadMIMEHeader()
		lim.n = 1 << 62
		if err != nil {
			return false, false, errors.New("a malformed response head")
		}
		line = sc.maskString(line)
		for _, vs := range h {
			for i, v := range vs {
				vs[i] = sc.maskString(v)
			}
		}
		proto, rest, _ := strings.Cut(line, " ")
		codeText, _, _ := strings.Cut(rest, " ")
		code, cerr := strconv.Atoi(codeText)
		if !strings.HasPrefix(proto, "HTTP/1.") || cerr != nil || len(codeText) != 3 || code < 100 {
			return false, false, fmt.Errorf("a malformed status line %.64q", line)
		}
		switch {
		case code == 101 && req.upgrade != "":
			writeHead(w, line, h, "Connection: Upgrade", "Upgrade: "+h.Get("Upgrade"))
			return false, true, w.Flush()
		case code < 200 && code != 101:
			writeHead(w, line, h)
			if err := w.Flush(); err != nil {
				return false, false, err
			}
			continue
		case code < 200:
			return false, false, errors.New("a protocol switch nobody asked for")
		}
		chunked, length, err := framing(h)
		if err != nil {
			return false, false, err
		}
		noBody := req.method == "HEAD" || code == 204 || code == 304
		closeAfter := slices.Contains(connectionTokens(h), "close") || proto == "HTTP/1.0"
		var extra []string
		switch {
		case noBody:
			if cl := h.Get("Content-Length"); cl != "" { // what a GET would have had
				extra = append(extra, "Content-Length: "+cl)
			}
		case !chunked && length < 0:
			closeAfter = true // the body ends when the server closes
		default:
			extra = framingHeaders(chunked, length)
		}
		if closeAfter {
			extra = append(extra, "Connection: close")
		}
		writeHead(w, line, h, extra...)
		switch {
		case noBody:
		case !chunked && length < 0:
			k, err := io.Copy(sc, r)
			n.Add(k)
			if err == nil {
				err = sc.Flush()
			}
			if err != nil {
				return false, false, err
			}
		default:
			if err := copyBody(w, sc, r, chunked, length, n); err != nil {
				return false, false, err
			}
		}
		return !closeAfter, false, w.Flush()
	}
}

// flushing passes each write on at once: a body streams as it comes.
type flushing struct{ w *bufio.Writer }

func (f flushing) Flush() error { return f.w.Flush() }

func (f flushing) Write(b []byte) (int, error) {
	k, err := f.w.Write(b)
	if err == nil {
		err = f.w.Flush()
	}
	return k, err
}
