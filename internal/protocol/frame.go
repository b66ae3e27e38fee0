package protocol

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Frame layout on the wire (all integers big-endian):
//
//	+----------------+----------------+------------------+-------------+
//	| header length  | body length    | header (JSON)    | body (raw)  |
//	| uint32         | uint32         | header length B  | body len B  |
//	+----------------+----------------+------------------+-------------+
//
// The header is one JSON object (see Header). The body is raw bytes: file
// contents, process output, stdin. Nothing binary is ever base64-encoded in
// the header.
const (
	// PrefixSize is the size of the fixed length prefix.
	PrefixSize = 8
	// MaxHeader caps a frame's JSON header. Larger frames are refused before
	// any of the header is read, so a hostile peer cannot exhaust memory.
	MaxHeader = 1 << 20
	// MaxBody caps a frame's raw body. Bulk data (files, output) travels in
	// chunks of at most ChunkSize.
	MaxBody = 16 << 20
	// ChunkSize is the size in which files are moved.
	ChunkSize = 2 << 20
	// DefaultWindow is the credit each stream starts with: how many body
	// bytes one side may send on a stream before the other grants more.
	DefaultWindow = 4 << 20
)

// Kind says what a frame is.
type Kind string

// The frame kinds.
const (
	// KindHello is the first frame each way.
	KindHello Kind = "hello"
	// KindRequest asks the agent to run Cmd; ID correlates everything that follows.
	KindRequest Kind = "req"
	// KindResponse ends a request: Data holds the result or Err the failure.
	KindResponse Kind = "res"
	// KindEvent is stream data from the agent for request ID (Stream names it).
	KindEvent Kind = "ev"
	// KindInput is stream data from the host for request ID (stdin).
	KindInput Kind = "in"
	// KindCancel tells the agent to abandon request ID.
	KindCancel Kind = "cancel"
	// KindWindow grants the peer Credit more body bytes on stream ID.
	KindWindow Kind = "win"
)

func (k Kind) valid() bool {
	switch k {
	case KindHello, KindRequest, KindResponse, KindEvent, KindInput, KindCancel, KindWindow:
		return true
	}
	return false
}

// Header is the JSON part of a frame. Which fields matter depends on Kind.
type Header struct {
	Kind      Kind   `json:"k"`
	ID        uint64 `json:"id,omitempty"`
	Cmd       Cmd    `json:"cmd,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
	// Stream names the stream an event or input belongs to (stdout, stderr, output, stdin).
	Stream string `json:"s,omitempty"`
	// Offset is the stream offset of the body's first byte, where the stream has offsets.
	Offset int64 `json:"off,omitempty"`
	// EOF marks the end of an input stream.
	EOF bool `json:"eof,omitempty"`
	// Credit is the number of bytes a window frame grants.
	Credit int64 `json:"n,omitempty"`
	// Err is set on a failed response.
	Err *Error `json:"err,omitempty"`
	// Data holds request arguments, a response's result, an event's payload or a hello.
	Data json.RawMessage `json:"d,omitempty"`
	// File marks a response that carries one open file descriptor, sent
	// (SCM_RIGHTS) with the frame's first byte (see CapPassFiles).
	File bool `json:"file,omitempty"`
}

// Frame is a decoded frame.
type Frame struct {
	Header
	Body []byte
}

// ErrFrameTooLarge is returned when a frame's declared sizes exceed the caps.
var ErrFrameTooLarge = errors.New("frame exceeds size limit")

// ErrMalformed is returned when a frame's header is not a valid header.
var ErrMalformed = errors.New("malformed frame")

// Reader decodes frames from a byte stream.
type Reader struct {
	br      *bufio.Reader
	files   *FileReader // nil: descriptors are neither expected nor kept
	maxBody int
	prefix  [PrefixSize]byte
	hdrBuf  []byte
}

// NewReader returns a Reader that refuses bodies over maxBody bytes (0 means MaxBody).
func NewReader(r io.Reader, maxBody int) *Reader {
	if maxBody <= 0 || maxBody > MaxBody {
		maxBody = MaxBody
	}
	rd := &Reader{br: bufio.NewReaderSize(r, 64<<10), maxBody: maxBody}
	if fr, ok := r.(*FileReader); ok {
		rd.files = fr
	}
	return rd
}

// TakeFile returns the descriptor the frame whose header was just read
// carries (Header.File): ErrNoFile when it declares one and none came (or
// the reader keeps none). The caller owns the file.
func (r *Reader) TakeFile() (*os.File, error) {
	if r.files == nil {
		return nil, ErrNoFile
	}
	if f := r.files.take(); f != nil {
		return f, nil
	}
	return nil, ErrNoFile
}

// Read decodes the next frame. Body is a fresh slice the caller owns.
// On ErrFrameTooLarge or ErrMalformed the stream is unusable: close it.
func (r *Reader) Read() (*Frame, error) {
	f := new(Frame)
	n, err := r.ReadHeader(&f.Header)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		f.Body = make([]byte, n)
		if err := r.ReadBody(f.Body); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// ReadHeader decodes the next frame's header into h and returns the length of
// its body, which the caller must then consume with ReadBody (or Discard).
func (r *Reader) ReadHeader(h *Header) (int, error) {
	if _, err := io.ReadFull(r.br, r.prefix[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w: truncated length prefix", ErrMalformed)
		}
		return 0, err
	}
	hl := binary.BigEndian.Uint32(r.prefix[0:4])
	bl := binary.BigEndian.Uint32(r.prefix[4:8])
	if hl == 0 {
		return 0, fmt.Errorf("%w: empty header", ErrMalformed)
	}
	if hl > MaxHeader {
		return 0, fmt.Errorf("%w: header of %d bytes (limit %d)", ErrFrameTooLarge, hl, MaxHeader)
	}
	if uint64(bl) > uint64(r.maxBody) {
		return 0, fmt.Errorf("%w: body of %d bytes (limit %d)", ErrFrameTooLarge, bl, r.maxBody)
	}
	if cap(r.hdrBuf) < int(hl) {
		r.hdrBuf = make([]byte, hl)
	}
	buf := r.hdrBuf[:hl]
	if _, err := io.ReadFull(r.br, buf); err != nil {
		return 0, fmt.Errorf("%w: truncated header: %v", ErrMalformed, err)
	}
	*h = Header{}
	if err := json.Unmarshal(buf, h); err != nil {
		return 0, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if !h.Kind.valid() {
		return 0, fmt.Errorf("%w: unknown frame kind %q", ErrMalformed, h.Kind)
	}
	// Data is a sub-slice of the reused buffer; give it its own memory.
	if h.Data != nil {
		h.Data = append(json.RawMessage(nil), h.Data...)
	}
	return int(bl), nil
}

// ReadBody reads exactly len(p) body bytes into p.
func (r *Reader) ReadBody(p []byte) error {
	if _, err := io.ReadFull(r.br, p); err != nil {
		return fmt.Errorf("%w: truncated body: %v", ErrMalformed, err)
	}
	return nil
}

// Discard skips n body bytes.
func (r *Reader) Discard(n int) error {
	if _, err := r.br.Discard(n); err != nil {
		return fmt.Errorf("%w: truncated body: %v", ErrMalformed, err)
	}
	return nil
}

// AppendFrame encodes h's prefix and header into dst, for a body of bodyLen
// bytes that the caller writes right after.
func AppendFrame(dst []byte, h *Header, bodyLen int) ([]byte, error) {
	if bodyLen < 0 || bodyLen > MaxBody {
		return dst, fmt.Errorf("%w: body of %d bytes (limit %d)", ErrFrameTooLarge, bodyLen, MaxBody)
	}
	start := len(dst)
	dst = append(dst, make([]byte, PrefixSize)...)
	var err error
	dst, err = appendJSON(dst, h)
	if err != nil {
		return dst[:start], err
	}
	hl := len(dst) - start - PrefixSize
	if hl > MaxHeader {
		return dst[:start], fmt.Errorf("%w: header of %d bytes (limit %d)", ErrFrameTooLarge, hl, MaxHeader)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(hl))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(bodyLen))
	return dst, nil
}

func appendJSON(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// WriteFrame writes one frame to w (see FrameWriter for concurrent use).
func WriteFrame(w io.Writer, h *Header, body []byte) error {
	return NewFrameWriter(w).Write(h, body)
}
