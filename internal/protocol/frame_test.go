package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

func encode(t testing.TB, h *Header, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteFrame(&buf, h, body); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	frames := []struct {
		h    Header
		body []byte
	}{
		{Header{Kind: KindHello, Data: json.RawMessage(`{"protocol":"1.0"}`)}, nil},
		{Header{Kind: KindRequest, ID: 7, Cmd: CmdFileWrite, TimeoutMs: 1500, Data: json.RawMessage(`{"path":"a"}`)}, []byte("\x00\x01binary\xff")},
		{Header{Kind: KindEvent, ID: 7, Stream: StreamStdout, Offset: 1 << 40}, bytes.Repeat([]byte("x"), 70000)},
		{Header{Kind: KindResponse, ID: 7, Err: &Error{Code: CodePathEscape, Message: "no"}}, nil},
		{Header{Kind: KindWindow, ID: 9, Credit: 1 << 20}, nil},
		{Header{Kind: KindInput, ID: 9, EOF: true}, nil},
		{Header{Kind: KindCancel, ID: 9}, nil},
	}
	var stream bytes.Buffer
	for _, f := range frames {
		stream.Write(encode(t, &f.h, f.body))
	}
	r := NewReader(&stream, 0)
	for i, want := range frames {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Kind != want.h.Kind || got.ID != want.h.ID || got.Cmd != want.h.Cmd || got.Stream != want.h.Stream ||
			got.Offset != want.h.Offset || got.Credit != want.h.Credit || got.EOF != want.h.EOF || got.TimeoutMs != want.h.TimeoutMs ||
			string(got.Data) != string(want.h.Data) || !bytes.Equal(got.Body, want.body) {
			t.Fatalf("frame %d: got %+v body %d, want %+v body %d", i, got.Header, len(got.Body), want.h, len(want.body))
		}
		if (want.h.Err == nil) != (got.Err == nil) || (got.Err != nil && *got.Err != *want.h.Err) {
			t.Fatalf("frame %d: err %v, want %v", i, got.Err, want.h.Err)
		}
	}
	if _, err := r.Read(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

func prefix(hl, bl uint32) []byte {
	var p [PrefixSize]byte
	binary.BigEndian.PutUint32(p[0:], hl)
	binary.BigEndian.PutUint32(p[4:], bl)
	return p[:]
}

func TestReaderRefuses(t *testing.T) {
	good := encode(t, &Header{Kind: KindCancel, ID: 1}, nil)
	cases := []struct {
		name  string
		input []byte
		want  error
	}{
		{"huge header", prefix(MaxHeader+1, 0), ErrFrameTooLarge},
		{"4 GiB header", prefix(0xffffffff, 0), ErrFrameTooLarge},
		{"huge body", append(prefix(2, MaxBody+1), "{}"...), ErrFrameTooLarge},
		{"empty header", prefix(0, 0), ErrMalformed},
		{"not json", append(prefix(3, 0), "abc"...), ErrMalformed},
		{"unknown kind", append(prefix(10, 0), `{"k":"zz"}`...), ErrMalformed},
		{"missing kind", append(prefix(2, 0), `{}`...), ErrMalformed},
		{"truncated prefix", []byte{0, 0, 0}, ErrMalformed},
		{"truncated header", prefix(100, 0), ErrMalformed},
		{"truncated body", append(prefix(10, 5), `{"k":"in"}ab`...), ErrMalformed},
		{"json array", append(prefix(2, 0), `[]`...), ErrMalformed},
		{"kind wrong type", append(prefix(8, 0), `{"k":12}`...), ErrMalformed},
		{"trailing garbage", append(prefix(uint32(len(good)-PrefixSize+1), 0), append(good[PrefixSize:], '}')...), ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.input), 0).Read()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// An oversized declared size is refused before anything is allocated for it.
func TestOversizedFrameAllocatesNothing(t *testing.T) {
	input := prefix(MaxHeader+1, 0)
	allocs := testing.AllocsPerRun(100, func() {
		NewReader(bytes.NewReader(input), 0).Read()
	})
	// The reader itself (bufio buffer, errors) allocates a little; a 1 MiB
	// header buffer would show up as far more bytes, measured below.
	if allocs > 10 {
		t.Fatalf("%v allocations for a refused frame", allocs)
	}
	r := NewReader(bytes.NewReader(prefix(0xffffffff, 0xffffffff)), 0)
	if _, err := r.Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatal(err)
	}
	if cap(r.hdrBuf) != 0 {
		t.Fatalf("header buffer of %d bytes allocated for a refused frame", cap(r.hdrBuf))
	}
}

func TestSmallerBodyCap(t *testing.T) {
	frame := encode(t, &Header{Kind: KindInput, ID: 1}, make([]byte, 100))
	if _, err := NewReader(bytes.NewReader(frame), 99).Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("%v", err)
	}
	if _, err := NewReader(bytes.NewReader(frame), 100).Read(); err != nil {
		t.Fatal(err)
	}
}

func TestWriteRefusesOversized(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, &Header{Kind: KindInput}, make([]byte, MaxBody+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("%v", err)
	}
	h := &Header{Kind: KindRequest, Data: json.RawMessage(`"` + strings.Repeat("a", MaxHeader) + `"`)}
	if err := WriteFrame(&buf, h, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("%v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("%d bytes written for refused frames", buf.Len())
	}
}

func TestErrorCodes(t *testing.T) {
	for _, c := range Codes() {
		got, ok := ParseCode(string(c))
		if !ok || got != c {
			t.Fatalf("ParseCode(%q) = %q, %v", c, got, ok)
		}
	}
	if _, ok := ParseCode("OWNED_ELSEWHERE"); ok {
		t.Fatal("OWNED_ELSEWHERE is a host error, not a wire code")
	}
	e := (&Error{Code: "MADE_UP", Message: "x"}).Normalize()
	if e.Code != CodeInternal || !strings.Contains(e.Message, "MADE_UP") {
		t.Fatalf("%+v", e)
	}
	wrapped := errors.Join(errors.New("context"), Errorf(CodeNotRunning, "gone"))
	if !HasCode(wrapped, CodeNotRunning) || CodeOf(wrapped) != CodeNotRunning || CodeOf(errors.New("plain")) != CodeInternal {
		t.Fatal("code lookup through wrapping")
	}
	if !errors.Is(Errorf(CodeTimeout, "slow"), &Error{Code: CodeTimeout}) {
		t.Fatal("errors.Is by code")
	}
}

// Every code has a class of its own: what an agent answers is classified
// without ambiguity, and CodeOf's INTERNAL is the Internal class.
func TestCodeClasses(t *testing.T) {
	seen := map[errdefs.Class]Code{}
	for _, c := range Codes() {
		cl := c.Class()
		if prev, dup := seen[cl]; dup {
			t.Errorf("%s and %s are both %v", prev, c, cl)
		}
		seen[cl] = c
		if got := errdefs.Of(fmt.Errorf("x: %w", Errorf(c, "y"))); got != cl {
			t.Errorf("an error of code %s is classed %v, want %v", c, got, cl)
		}
	}
	if CodeInternal.Class() != errdefs.Internal || Code("MADE_UP").Class() != errdefs.Internal {
		t.Error("INTERNAL and unknown codes are Internal")
	}
	if !errdefs.IsNotRunning(Errorf(CodeNotRunning, "gone")) || !errdefs.IsPermission(Errorf(CodePathEscape, "out")) {
		t.Error("IsXxx answers for wire errors")
	}
}

func TestVersion(t *testing.T) {
	ma, mi, err := ParseVersion(Version())
	if err != nil || ma != Major || mi != Minor {
		t.Fatalf("%d %d %v", ma, mi, err)
	}
	for _, bad := range []string{"", "1", "a.b", "1.", "-1.0", "1.-2"} {
		if _, _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
}

func TestCommandValidate(t *testing.T) {
	for _, c := range []Command{{}, {Argv: []string{""}}, {Argv: []string{"a"}, Shell: "b"}, {Argv: []string{"a"}, Env: []string{"=x"}}, {Shell: "x", Env: []string{"NOVALUE"}}} {
		if err := c.Validate(); !HasCode(err, CodeBadRequest) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, c := range []Command{{Argv: []string{"ls"}}, {Shell: "ls", Env: []string{"A=", "B=c=d"}}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
