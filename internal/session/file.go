package session

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// Report says what loading a session file stepped over.
type Report struct {
	// TornBytes is the size of a torn tail: a last line without its
	// newline, or a last line that is not valid JSON, left by a crash in
	// the middle of a write. It is ignored, and the next append cuts it off.
	TornBytes int64
	// Skipped lists corrupt lines stepped over by a Lenient open, and
	// entries kept although their parent could not be found.
	Skipped []*CorruptError
}

// ingest reads the complete lines of data, the bytes of the file from
// s.end on, and applies each entry. It returns the number of bytes
// consumed: up to the end of the last good line. A bad last line and bytes
// after the last newline are the torn tail, not consumed. moveLeaf says
// whether the entries move the leaf (on load) or not (lines another writer
// appended, read before an append: this Session keeps its own position).
func (s *Session) ingest(data []byte, moveLeaf bool) (int, error) {
	var lines [][]byte
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break // torn: no newline
		}
		lines = append(lines, data[off:off+nl])
		off += nl + 1
	}
	decoded := decodeLines(lines)
	consumed := 0
	for i, line := range lines {
		lineNo := s.lines + 1
		e, err := decoded[i].e, decoded[i].err
		if err == nil {
			err = s.validate(e, line, lineNo)
		}
		if err != nil {
			if i == len(lines)-1 && consumed+len(line)+1 == len(data) {
				break // the last line: torn (a crash mid-write), not corrupt
			}
			cerr := &CorruptError{Path: s.path, Line: lineNo, Err: err}
			if !s.opts.lenient {
				return consumed, cerr
			}
			s.report.Skipped = append(s.report.Skipped, cerr)
		} else {
			e.Line = lineNo
			s.apply(e, moveLeaf)
		}
		s.lines++
		consumed += len(line) + 1
	}
	return consumed, nil
}

type decoded struct {
	e   *Entry
	err error
}

// decodeLines decodes lines into entries, on every CPU when there are many
// (decoding is most of the time a resume takes; checking them against each
// other stays sequential).
func decodeLines(lines [][]byte) []decoded {
	out := make([]decoded, len(lines))
	decode := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			e := new(Entry)
			if err := json.Unmarshal(lines[i], e); err != nil {
				out[i].err = err
			} else {
				out[i].e = e
			}
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(lines)/256)
	if workers < 2 {
		decode(0, len(lines))
		return out
	}
	var wg sync.WaitGroup
	per := (len(lines) + workers - 1) / workers
	for lo := 0; lo < len(lines); lo += per {
		wg.Go(func() { decode(lo, min(lo+per, len(lines))) })
	}
	wg.Wait()
	return out
}

// validate checks a decoded entry against the entries before it.
func (s *Session) validate(e *Entry, line []byte, lineNo int) error {
	if e.ID == "" {
		return errors.New("entry has no id")
	}
	if err := e.check(); err != nil {
		return err
	}
	if !e.Type.Known() {
		e.Raw = line
	}
	if _, dup := s.byID[e.ID]; dup {
		return fmt.Errorf("entry id %q appears twice", e.ID)
	}
	switch {
	case lineNo == 1 && e.Type != TypeHeader:
		return fmt.Errorf("the first line is a %s entry, not the session header", e.Type)
	case lineNo == 1 && e.ParentID != "":
		return errors.New("the header has a parent")
	case lineNo > 1 && e.Type == TypeHeader:
		return errors.New("a second header")
	case lineNo > 1 && s.byID[e.ParentID] == nil:
		err := fmt.Errorf("entry %s names parent %q, which is not in the file", e.ID, e.ParentID)
		if !s.opts.lenient {
			return err
		}
		// Kept: its own subtree still reads; paths through it stop here.
		s.report.Skipped = append(s.report.Skipped, &CorruptError{Path: s.path, Line: lineNo, Err: err})
	}
	return nil
}

// load reads the whole file.
func (s *Session) load() error {
	var buf bytes.Buffer
	if st, err := s.f.Stat(); err == nil {
		buf.Grow(int(st.Size()) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(s.f); err != nil {
		return fmt.Errorf("reading session %s: %w", s.path, err)
	}
	data := buf.Bytes()
	n, err := s.ingest(data, true)
	if err != nil {
		return err
	}
	if s.lines == 0 || len(s.entries) == 0 || s.entries[0].Type != TypeHeader {
		return &CorruptError{Path: s.path, Line: 1, Err: errors.New("no complete header line")}
	}
	s.header = s.entries[0].Header
	s.end = int64(n)
	s.report.TornBytes = int64(len(data) - n)
	return nil
}

// catchUp runs under the file lock before an append: it reads lines other
// writers appended since s.end, then cuts off a torn tail so the new line
// starts on a clean line boundary.
func (s *Session) catchUp() error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("session %s: %w", s.path, err)
	}
	size := st.Size()
	switch {
	case size == s.end:
		return nil
	case size < s.end:
		return fmt.Errorf("session file %s shrank under this session (%d bytes, %d expected): reopen it", s.path, size, s.end)
	}
	data := make([]byte, size-s.end)
	if _, err := s.f.ReadAt(data, s.end); err != nil {
		return fmt.Errorf("reading session %s: %w", s.path, err)
	}
	n, err := s.ingest(data, false)
	if err != nil {
		return err
	}
	s.end += int64(n)
	if s.end < size {
		// A torn tail: nobody is writing (we hold the lock), so it was a crash.
		if err := s.f.Truncate(s.end); err != nil {
			return fmt.Errorf("cutting the torn last line of session %s: %w", s.path, err)
		}
		s.report.TornBytes = 0
	}
	return nil
}

// readInfo reads a session's header line and the end of its last line.
// A file whose header cannot be read gets an Info with Modified, Size and
// Err set.
func readInfo(path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	info := Info{Modified: st.ModTime(), Size: st.Size()}
	line, err := bufio.NewReader(io.LimitReader(f, MaxLineSize)).ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A long header: read it whole.
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			line, err = bufio.NewReader(io.LimitReader(f, MaxLineSize)).ReadBytes('\n')
		}
	}
	if err != nil {
		info.Err = &CorruptError{Path: path, Line: 1, Err: errors.New("no complete header line")}
		return info, nil
	}
	var e Entry
	if err := json.Unmarshal(line, &e); err != nil || e.Type != TypeHeader || e.Header == nil {
		info.Err = &CorruptError{Path: path, Line: 1, Err: errors.New("the first line is not a session header")}
		return info, nil
	}
	h := e.Header
	info.ID, info.Title, info.Created, info.Entries = h.SessionID, h.Title, h.Created, lineCount(f, st.Size())
	info.Provider, info.Model, info.Agent, info.Neuron, info.ParentSession = h.Provider, h.Model, h.Agent, h.Neuron, h.ParentSession
	return info, nil
}

// lineCount returns the number of complete lines in the file: the "n" at
// the end of the last line, read from the last few kilobytes; failing that
// (a torn or foreign last line), a count of the newlines in the file.
func lineCount(f *os.File, size int64) int {
	const tail = 4096
	off := max(size-tail, 0)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err == nil {
		if n, ok := lastN(buf); ok {
			return n
		}
	}
	n := 0
	r := io.NewSectionReader(f, 0, size)
	chunk := make([]byte, 256<<10)
	for {
		k, err := r.Read(chunk)
		n += bytes.Count(chunk[:k], []byte{'\n'})
		if err != nil {
			return n
		}
	}
}

// lastN parses `"n":123}` at the end of the last complete line of buf.
func lastN(buf []byte) (int, bool) {
	if len(buf) == 0 || buf[len(buf)-1] != '\n' {
		return 0, false
	}
	line := bytes.TrimRight(buf[:len(buf)-1], " \r\t")
	if !bytes.HasSuffix(line, []byte("}")) {
		return 0, false
	}
	line = line[:len(line)-1]
	i := len(line)
	for i > 0 && line[i-1] >= '0' && line[i-1] <= '9' {
		i--
	}
	if i == len(line) || !bytes.HasSuffix(line[:i], []byte(`,"n":`)) {
		return 0, false
	}
	n, err := strconv.Atoi(string(line[i:]))
	return n, err == nil
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// randomID returns prefix followed by n random characters of [a-z0-9].
func randomID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand panics if the OS source breaks)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + string(b)
}

// ValidateID reports whether id is usable as a session id (and so as a
// file name): 1 to 64 characters of [a-zA-Z0-9._-], not starting with '.'
// or '-'.
func ValidateID(id string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidID, id, why) }
	switch {
	case id == "":
		return bad("empty")
	case len(id) > 64:
		return bad("longer than 64 characters")
	case id[0] == '.' || id[0] == '-':
		return bad("must not start with '.' or '-'")
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("contains %q: use only ASCII letters, digits, '.', '_' and '-'", c))
		}
	}
	return nil
}
