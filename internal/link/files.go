package link

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// pipelineDepth is how many chunks of one file are in flight at once.
const pipelineDepth = 4

// WriteOptions shape a file write.
type WriteOptions struct {
	// Mode of a new file (default 0644; an existing file keeps its mode).
	Mode fs.FileMode
	// Parents creates missing parent directories.
	Parents bool
}

func (o *WriteOptions) mode() uint32 {
	if o == nil {
		return 0
	}
	return uint32(o.Mode.Perm())
}

func (o *WriteOptions) parents() bool { return o != nil && o.Parents }

// WriteFile replaces the file at p with data. Readers see the old content
// or the new, never a mix: small files are written in one atomic request,
// large ones into a temporary file beside p that is renamed over it.
func (c *Client) WriteFile(ctx context.Context, p string, data []byte, o *WriteOptions) error {
	_, err := c.writeFile(ctx, p, chunkSource{data: data}, o)
	return err
}

// WriteFileStat is WriteFile, returning the file's size and modification
// time after the write when the agent reports them (a small file's atomic
// write, agents since protocol 1.1); nil otherwise.
func (c *Client) WriteFileStat(ctx context.Context, p string, data []byte, o *WriteOptions) (*protocol.FileInfo, error) {
	if len(data) >= protocol.ChunkSize {
		return nil, c.WriteFile(ctx, p, data, o)
	}
	args := &protocol.FileWriteArgs{Path: p, Mode: o.mode(), Parents: o.parents(), Atomic: true}
	var res protocol.FileWriteResult
	if _, err := c.call(ctx, protocol.CmdFileWrite, args, data, &res); err != nil {
		return nil, err
	}
	if res.ModTime.IsZero() {
		return nil, nil
	}
	return &protocol.FileInfo{Name: path.Base(p), Path: p, Type: protocol.TypeFile, Size: res.Size, ModTime: res.ModTime}, nil
}

// WriteFileFrom streams r into the file at p (as WriteFile) and returns the
// number of bytes written.
//
// A source that blocks (a pipe, a terminal, a request body) does not hold
// the call when the agent goes or ctx ends: it fails at once, NOT_RUNNING
// or the context's error, and the read it was waiting in ends when the
// source's owner closes the source.
func (c *Client) WriteFileFrom(ctx context.Context, p string, r io.Reader, o *WriteOptions) (int64, error) {
	src := chunkSource{r: r}
	var conn *Conn
	switch l := c.c.(type) {
	case *Link:
		var err error
		if conn, err = l.Conn(); err != nil {
			return 0, err
		}
	case *Conn:
		conn = l
	}
	if f, ok := r.(*os.File); !ok || !regularFile(f) {
		src.ctx = ctx
		if conn != nil {
			src.gone = conn.Done()
		}
	}
	n, err := c.writeFile(ctx, p, src, o)
	if errors.Is(err, errSourceAborted) {
		if ctx.Err() != nil {
			return n, ctxError(protocol.CmdFileWrite, ctx)
		}
		return n, conn.notRunning()
	}
	return n, err
}

func regularFile(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// sourceReader reads a chunkSource's reader as chunkSource.read does.
type sourceReader struct{ s *chunkSource }

func (r sourceReader) Read(p []byte) (int, error) { return r.s.read(p) }

// errSourceAborted: a read of the source was left because the agent went
// or the call's context ended.
var errSourceAborted = errors.New("the source's read was left")

// chunkSource yields a file's content in chunks: slices of data without a
// copy, or reads from r into pooled buffers.
type chunkSource struct {
	data []byte
	r    io.Reader
	off  int
	// ctx and gone, when set, end a read of r that waits: a source that
	// may block (not a regular file). gone is the connection's end.
	ctx  context.Context
	gone <-chan struct{}
}

// read reads r into p, or leaves the read (errSourceAborted) when the
// context ends or the connection does. The read is made into a buffer of
// its own, so that one left behind, which ends when r's owner closes r,
// writes into nothing the caller uses again.
func (s *chunkSource) read(p []byte) (int, error) {
	if s.ctx == nil {
		return s.r.Read(p)
	}
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b := make([]byte, min(len(p), maxSourceRead))
		n, err := s.r.Read(b)
		ch <- result{b[:n], err}
	}()
	select {
	case r := <-ch:
		return copy(p, r.b), r.err
	case <-s.ctx.Done():
	case <-s.gone:
	}
	return 0, errSourceAborted
}

// maxSourceRead bounds one read of a source that may block (a pipe gives
// at most 64 KiB a read anyway).
const maxSourceRead = 256 << 10

// next returns the next chunk (empty at the end) and a release func.
func (s *chunkSource) next() ([]byte, func(), error) {
	if s.r == nil {
		n := min(protocol.ChunkSize, len(s.data)-s.off)
		p := s.data[s.off : s.off+n]
		s.off += n
		return p, func() {}, nil
	}
	buf := chunkPool.Get().(*[]byte)
	// Only a clean io.EOF ends the data: a source that fails with
	// io.ErrUnexpectedEOF (an HTTP body cut short) is a failure, and the
	// file must stay as it was.
	n, err := 0, error(nil)
	for n < len(*buf) && err == nil {
		var k int
		k, err = s.read((*buf)[n:])
		n += k
	}
	if err == io.EOF {
		err = nil
	}
	if err != nil {
		chunkPool.Put(buf)
		return nil, nil, fmt.Errorf("reading the source: %w", err)
	}
	return (*buf)[:n], func() { chunkPool.Put(buf) }, nil
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, protocol.ChunkSize); return &b }}

func (c *Client) writeFile(ctx context.Context, p string, src chunkSource, o *WriteOptions) (int64, error) {
	first, release, err := src.next()
	if err != nil {
		return 0, err
	}
	args := &protocol.FileWriteArgs{Path: p, Mode: o.mode(), Parents: o.parents()}
	if len(first) < protocol.ChunkSize {
		// The whole file fits in one request: write it atomically there.
		defer release()
		args.Atomic = true
		_, err := c.call(ctx, protocol.CmdFileWrite, args, first, nil)
		return int64(len(first)), err
	}
	// Large: stream chunks into a temporary file beside p, then rename it.
	if args.Parents {
		if _, err := c.Mkdir(ctx, path.Dir(p)); err != nil {
			release()
			return 0, err
		}
		args.Parents = false
	}
	// Write through a symlink to its target, as the one-request path does.
	target, err := c.Resolve(ctx, p)
	if err != nil {
		release()
		return 0, err
	}
	p = target.Path
	if args.Mode == 0 {
		if st, err := c.Stat(ctx, p); err == nil && st.Type == protocol.TypeFile {
			args.Mode = st.Mode // keep the mode of the file being replaced
		}
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path.Join(path.Dir(p), "."+path.Base(p)+".cortex-"+hex.EncodeToString(rnd[:]))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		slots    = make(chan struct{}, pipelineDepth)
		off      int64
	)
	setErr := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return firstErr != nil }
	chunk := first
	if c.direct() {
		// The agent makes the temporary file (its own, removed if this
		// client goes away before the move); the host fills it directly.
		if n, err := c.writeDirect(ctx, tmp, args, first, src); err != errFallback {
			release()
			off, chunk = n, nil
			if err != nil {
				setErr(err)
			}
		}
	}
	for len(chunk) > 0 && !failed() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			setErr(ctxError(protocol.CmdFileWrite, ctx))
			release()
			chunk = nil
			continue
		}
		a := *args
		a.Path, a.Offset, a.Temp = tmp, off, true
		wg.Add(1)
		go func(p []byte, release func()) {
			defer wg.Done()
			defer func() { <-slots }()
			defer release()
			if _, err := c.call(ctx, protocol.CmdFileWrite, &a, p, nil); err != nil {
				setErr(err)
			}
		}(chunk, release)
		off += int64(len(chunk))
		if len(chunk) < protocol.ChunkSize {
			break
		}
		if chunk, release, err = src.next(); err != nil {
			setErr(err)
			break
		}
		if len(chunk) == 0 {
			release()
		}
	}
	wg.Wait()
	if firstErr == nil {
		_, firstErr = c.call(ctx, protocol.CmdFileMove, &protocol.MoveArgs{From: tmp, To: p}, nil, nil)
	}
	if firstErr != nil {
		// Leave nothing behind; the target was never touched.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		c.call(cctx, protocol.CmdFileRemove, &protocol.RemoveArgs{Path: tmp}, nil, nil)
		cancel()
		return 0, firstErr
	}
	return off, nil
}

// ReadFile returns the whole content of the file at p.
func (c *Client) ReadFile(ctx context.Context, p string) ([]byte, error) {
	st, err := c.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	if st.Type == protocol.TypeDir {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "read %s: is a directory", st.Path)
	}
	if c.direct() && st.Size > directMin {
		var b bytes.Buffer
		b.Grow(int(st.Size) + 1) // +1: the read of EOF finds room and no regrowth
		if _, err := c.readDirect(ctx, p, 0, -1, &b); err != errFallback {
			return b.Bytes(), err
		}
	}
	buf := make([]byte, st.Size)
	n, eof, err := c.readInto(ctx, p, buf)
	if err != nil {
		return nil, err
	}
	buf = buf[:n]
	// A file that grew, shrank, or reports no size (/proc): read to the end.
	for !eof {
		res, body, err := c.readChunk(ctx, p, int64(len(buf)), nil)
		if err != nil {
			return nil, err
		}
		buf = append(buf, body...)
		eof = res.EOF || res.N == 0
	}
	return buf, nil
}

// readInto fills buf from the start of the file with pipelined chunk reads
// that land directly in buf. It returns how much of buf was filled and
// whether the agent saw the end of the file there.
func (c *Client) readInto(ctx context.Context, p string, buf []byte) (int64, bool, error) {
	type part struct {
		off int64
		n   int
		eof bool
		err error
	}
	chunks := (len(buf) + protocol.ChunkSize - 1) / protocol.ChunkSize
	results := make([]part, chunks)
	slots := make(chan struct{}, pipelineDepth)
	var wg sync.WaitGroup
	for i := 0; i < chunks; i++ {
		off := i * protocol.ChunkSize
		dst := buf[off:min(len(buf), off+protocol.ChunkSize)]
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return 0, false, ctxError(protocol.CmdFileRead, ctx)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-slots }()
			res, body, err := c.readChunk(ctx, p, int64(off), dst)
			if err == nil && len(body) > 0 && &body[0] != &dst[0] {
				copy(dst, body)
			}
			results[i] = part{off: int64(off), err: err}
			if res != nil {
				results[i].n, results[i].eof = res.N, res.EOF
			}
		}(i)
	}
	wg.Wait()
	var filled int64
	eof := false
	for _, r := range results {
		if r.err != nil {
			return 0, false, r.err
		}
		if r.off != filled {
			break // an earlier chunk came back short: the file shrank
		}
		filled += int64(r.n)
		eof = r.eof
	}
	return filled, eof, nil
}

func (c *Client) readChunk(ctx context.Context, p string, off int64, into []byte) (*protocol.FileReadResult, []byte, error) {
	length := int64(protocol.ChunkSize)
	if into != nil {
		length = int64(len(into))
	}
	resp, err := c.c.Call(ctx, &Request{Cmd: protocol.CmdFileRead, Args: &protocol.FileReadArgs{Path: p, Offset: off, Length: length}, Into: into})
	if err != nil {
		return nil, nil, err
	}
	var res protocol.FileReadResult
	if err := resp.Decode(&res); err != nil {
		return nil, nil, err
	}
	if res.N != len(resp.Body) || int64(res.N) > length || res.N < 0 {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "file_read: asked for %d bytes; the agent announced %d and sent %d", length, res.N, len(resp.Body))
	}
	return &res, resp.Body, nil
}

// ReadFileTo streams the file at p into w and returns the bytes copied.
// Chunks are read ahead, pipelineDepth at a time, into reused buffers.
func (c *Client) ReadFileTo(ctx context.Context, p string, w io.Writer) (int64, error) {
	return c.ReadRangeTo(ctx, p, 0, -1, w)
}

// ReadRangeTo streams n bytes of the file at p from offset off into w (to
// the end of the file when n < 0, or when the file ends first) and returns
// the bytes copied.
func (c *Client) ReadRangeTo(ctx context.Context, p string, off, n int64, w io.Writer) (int64, error) {
	if off < 0 {
		return 0, protocol.Errorf(protocol.CodeBadRequest, "read %s: negative offset %d", p, off)
	}
	end := int64(-1)
	if n >= 0 {
		end = off + n
	}
	var total int64
	if !c.view.usable() && c.passFiles() && (end < 0 || end-off > directMin) {
		// No host view, so the agent passes the file at once, whatever its
		// size: one round trip, and no chunk through the channel first.
		m, err := c.readPassed(ctx, p, off, end, w)
		if err != errFallback {
			return m, err
		}
	} else if c.direct() && (end < 0 || end-off > directMin) {
		// The first chunk through the channel: a small file ends there, at
		// one round trip. The rest of a large one the host copies itself.
		buf := chunkPool.Get().(*[]byte)
		res, body, err := c.readChunk(ctx, p, off, *buf)
		if err == nil {
			reserveFresh(w, int64(len(body)))
			_, err = w.Write(body)
		}
		chunkPool.Put(buf)
		if err != nil {
			return 0, err
		}
		total, off = int64(len(body)), off+int64(len(body))
		if res.EOF || res.N < protocol.ChunkSize {
			return total, nil
		}
		m, err := c.readDirect(ctx, p, off, end, w)
		if err != errFallback {
			return total + m, err
		}
	}
	type pending struct {
		done chan struct{}
		buf  *[]byte
		want int
		res  *protocol.FileReadResult
		body []byte
		err  error
	}
	issue := func(at int64) *pending {
		pd := &pending{done: make(chan struct{}), buf: chunkPool.Get().(*[]byte), want: protocol.ChunkSize}
		if end >= 0 {
			pd.want = int(min(int64(protocol.ChunkSize), end-at))
		}
		go func() {
			defer close(pd.done)
			pd.res, pd.body, pd.err = c.readChunk(ctx, p, at, (*pd.buf)[:pd.want])
		}()
		return pd
	}
	var (
		queue []*pending
		next  = off
	)
	defer func() {
		for _, pd := range queue {
			<-pd.done // every reader goroutine ends before we return
			chunkPool.Put(pd.buf)
		}
	}()
	for {
		for len(queue) < pipelineDepth && (end < 0 || next < end) {
			queue = append(queue, issue(next))
			next += protocol.ChunkSize
		}
		if len(queue) == 0 {
			return total, nil // n bytes copied (or n was 0)
		}
		pd := queue[0]
		<-pd.done
		queue = queue[1:]
		err := pd.err
		if err == nil {
			reserveFresh(w, int64(len(pd.body)))
			_, err = w.Write(pd.body)
			total += int64(len(pd.body))
		}
		chunkPool.Put(pd.buf)
		if err != nil {
			return total, err
		}
		if pd.res.EOF || pd.res.N < pd.want {
			return total, nil
		}
	}
}

// Stat describes the file at p, following symlinks.
func (c *Client) Stat(ctx context.Context, p string) (*protocol.FileInfo, error) {
	var fi protocol.FileInfo
	_, err := c.call(ctx, protocol.CmdStat, &protocol.StatArgs{Path: p}, nil, &fi)
	return &fi, err
}

// Lstat describes the file at p; a symlink is described itself.
func (c *Client) Lstat(ctx context.Context, p string) (*protocol.FileInfo, error) {
	var fi protocol.FileInfo
	_, err := c.call(ctx, protocol.CmdStat, &protocol.StatArgs{Path: p, NoFollow: true}, nil, &fi)
	return &fi, err
}

// Exists reports whether p exists.
func (c *Client) Exists(ctx context.Context, p string) (bool, error) {
	var r protocol.ExistsResult
	_, err := c.call(ctx, protocol.CmdFileExists, &protocol.PathArgs{Path: p}, nil, &r)
	return r.Exists, err
}

// MaxListTotal bounds the entries List accepts for one directory, however
// many pages the agent says there are.
const MaxListTotal = 1 << 20

// List returns the entries of directory p, sorted by name. The agent's
// pages are untrusted input: every entry must be well formed
// (protocol.FileInfo.CheckEntry), no name may appear twice (a directory
// that changed between two pages could otherwise show one name first as a
// symlink, then as a directory), and a page may not be larger than asked
// for nor the whole listing larger than MaxListTotal.
func (c *Client) List(ctx context.Context, p string) ([]protocol.FileInfo, error) {
	var all []protocol.FileInfo
	seen := map[string]bool{}
	next := 0
	for {
		var page protocol.FileListResult
		if _, err := c.call(ctx, protocol.CmdFileList, &protocol.FileListArgs{Path: p, Offset: next}, nil, &page); err != nil {
			return nil, err
		}
		if len(page.Entries) > protocol.MaxListEntries || len(all)+len(page.Entries) > MaxListTotal {
			return nil, badAnswer("file_list %s: a page of %d entries after %d (at most %d a page, %d in all)",
				p, len(page.Entries), len(all), protocol.MaxListEntries, MaxListTotal)
		}
		for i := range page.Entries {
			fi := &page.Entries[i]
			if err := fi.CheckEntry(); err != nil {
				return nil, badAnswer("file_list %s: %v", p, err)
			}
			if seen[fi.Name] {
				return nil, badAnswer("file_list %s: %q listed twice (the directory changed while it was read; try again)", p, fi.Name)
			}
			seen[fi.Name] = true
			fi.Mode = uint32(fi.Perm())
		}
		all = append(all, page.Entries...)
		if !page.More || page.Next <= next {
			return all, nil
		}
		next = page.Next
	}
}

// badAnswer is the error for an answer of the agent's that the host
// refuses to act on: INTERNAL, since a sound agent never sends one.
func badAnswer(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeInternal, "the agent's answer is refused: "+format, args...)
}

// Mkdir creates directory p and its parents; it returns the absolute path.
func (c *Client) Mkdir(ctx context.Context, p string) (string, error) {
	var r protocol.PathArgs
	_, err := c.call(ctx, protocol.CmdMkdir, &protocol.MkdirArgs{Path: p}, nil, &r)
	return r.Path, err
}

// Resolve returns p as an absolute path inside the neuron, symlinks resolved.
func (c *Client) Resolve(ctx context.Context, p string) (*protocol.ResolveResult, error) {
	var r protocol.ResolveResult
	_, err := c.call(ctx, protocol.CmdResolvePath, &protocol.PathArgs{Path: p}, nil, &r)
	return &r, err
}

// Remove removes p; recursive removes a directory and its contents.
func (c *Client) Remove(ctx context.Context, p string, recursive bool) error {
	_, err := c.call(ctx, protocol.CmdFileRemove, &protocol.RemoveArgs{Path: p, Recursive: recursive}, nil, nil)
	return err
}

// Symlink creates the symbolic link p pointing at target.
func (c *Client) Symlink(ctx context.Context, target, p string) error {
	_, err := c.call(ctx, protocol.CmdSymlink, &protocol.SymlinkArgs{Path: p, Target: target}, nil, nil)
	return err
}

// Move renames from to to (replacing to unless args.NoReplace).
func (c *Client) Move(ctx context.Context, args *protocol.MoveArgs) error {
	_, err := c.call(ctx, protocol.CmdFileMove, args, nil, nil)
	return err
}

// Search searches the files under args.Path inside the neuron, as ripgrep
// would (see protocol.SearchArgs): matching lines, the files that match,
// counts per file, or (mode find) the files whose paths match the globs.
// It needs an agent of protocol 1.1 or later; an older one answers
// UNSUPPORTED without the request being sent. ctx (or DefaultTimeout)
// bounds the search, and the agent stops when it ends.
func (c *Client) Search(ctx context.Context, args *protocol.SearchArgs) (*protocol.SearchResult, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	var res protocol.SearchResult
	if _, err := c.call(ctx, protocol.CmdSearch, args, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// readDirect copies the file at p from off to end (to its size when end <
// 0) into w without the channel, kernel to kernel where w is a file or a
// socket: from the host's side of the view where p lies beneath it, else
// through the file the agent passes (readPassed). It returns errFallback,
// having copied nothing, when neither can.
func (c *Client) readDirect(ctx context.Context, p string, off, end int64, w io.Writer) (int64, error) {
	if !c.view.usable() {
		return c.readPassed(ctx, p, off, end, w)
	}
	target, err := c.Resolve(ctx, p)
	if err != nil || !target.Exists {
		return 0, errFallback
	}
	rel, ok := c.view.rel(target.Path)
	if !ok {
		return c.readPassed(ctx, target.Path, off, end, w)
	}
	f, err := c.view.openRead(rel)
	if err != nil {
		return 0, errFallback
	}
	defer f.Close()
	return copyRange(ctx, f, target.Path, off, end, w)
}

// copyRange copies f, the file at p, from off to end (to the size it has
// now when end < 0) into w, kernel to kernel where it can, in steps of
// copyStep with ctx checked between them: a file the neuron makes huge
// (sparse), or grows while it is copied, costs the host no more than the
// size it had and the caller's deadline.
func copyRange(ctx context.Context, f *os.File, p string, off, end int64, w io.Writer) (int64, error) {
	if end < 0 {
		st, err := f.Stat()
		if err != nil {
			return 0, errFallback
		}
		end = st.Size()
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, errFallback
	}
	wf, _ := w.(*os.File)
	// Into a Fresh file, each step's blocks are allocated just before the
	// step is copied: whatever the neuron's file says it holds (a size,
	// blocks it can punch out meanwhile), nothing is reserved more than a
	// step ahead of the data.
	at, fresh := int64(0), false
	if ff, ok := w.(Fresh); ok {
		wf = ff.File
		at, fresh = atEnd(wf)
	}
	var total, reserved int64
	if fresh {
		defer func() {
			if total < reserved {
				wf.Truncate(at + total) // the blocks reserved past what came go back
			}
		}()
	}
	for total < end-off {
		if ctx.Err() != nil {
			return total, ctxError(protocol.CmdFileRead, ctx)
		}
		step := min(copyStep, end-off-total)
		if fresh {
			reserve(wf, at+total, step)
			reserved = total + step
		}
		n, err := int64(0), errNoKernelCopy
		if wf != nil {
			n, err = copyFiles(wf, f, step)
		}
		if err == errNoKernelCopy {
			// io.CopyN hands w a LimitedReader of the *os.File, which
			// sendfile or splice serve where w is a socket.
			n, err = io.CopyN(w, f, step)
			if err == io.EOF {
				err = nil
			}
		}
		total += n
		if err != nil {
			return total, hostError("read", p, err)
		}
		if n < step {
			break // it ends sooner: shrunk meanwhile
		}
	}
	return total, nil
}

// copyStep is how much copyRange copies between its checks of the context.
const copyStep = 8 << 20

// passFiles reports whether the agent can hand this host open files
// (protocol.CapPassFiles): large copies then go kernel to kernel without
// a host view, and without this host resolving any path of the neuron.
func (c *Client) passFiles() bool {
	p, ok := c.c.(interface{ PassFiles() bool })
	return ok && p.PassFiles()
}

// direct reports whether large copies can bypass the channel.
func (c *Client) direct() bool { return c.view.usable() || c.passFiles() }

// readPassed is readDirect through a file the agent opened and passed: it
// returns errFallback, having copied nothing, when the agent does not pass
// one (not a regular file, an error the channel's read reports better).
func (c *Client) readPassed(ctx context.Context, p string, off, end int64, w io.Writer) (int64, error) {
	if !c.passFiles() {
		return 0, errFallback
	}
	resp, err := c.c.Call(ctx, &Request{Cmd: protocol.CmdFileRead, Args: &protocol.FileReadArgs{Path: p, PassFile: true}, File: true})
	if err != nil || resp.File == nil {
		return 0, errFallback
	}
	f := resp.File
	defer f.Close()
	if _, err := checkPassed(f, false); err != nil {
		return 0, errFallback
	}
	return copyRange(ctx, f, p, off, end, w)
}

// passedTemp has the agent make the temporary file tmp of an upload and
// pass it, open for writing: errFallback when it does not (the channel
// writes the file it made).
func (c *Client) passedTemp(ctx context.Context, a *protocol.FileWriteArgs) (*os.File, error) {
	if !c.passFiles() {
		return nil, errFallback
	}
	a.PassFile = true
	resp, err := c.c.Call(ctx, &Request{Cmd: protocol.CmdFileWrite, Args: a, File: true})
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeUnsupported {
			return nil, errFallback // the connection changed under this call
		}
		return nil, err
	}
	if resp.File == nil {
		return nil, errFallback
	}
	f := resp.File
	size, err := checkPassed(f, true)
	if err == nil && size != 0 {
		err = f.Truncate(0) // something of the neuron wrote into it already
	}
	if err != nil {
		f.Close()
		return nil, errFallback
	}
	return f, nil
}

// openUploadTemp has the agent make an upload's temporary file a.Path and
// opens it for this host to fill: through the host view, or passed by the
// agent. errFallback: neither can, and the channel fills it.
func (c *Client) openUploadTemp(ctx context.Context, a *protocol.FileWriteArgs) (*os.File, error) {
	rel, ok := "", false
	if c.view.usable() {
		rel, ok = c.view.rel(a.Path)
	}
	if !ok {
		return c.passedTemp(ctx, a)
	}
	var made protocol.FileWriteResult
	if _, err := c.call(ctx, protocol.CmdFileWrite, a, nil, &made); err != nil {
		return nil, err
	}
	// Whatever sits at the name now is filled only if it is the file the
	// agent just made (its inode, one link): a process of the neuron that
	// swapped in a hard link to another file gets nothing written there.
	f, err := c.view.openTemp(rel, made.Ino)
	if err != nil {
		return nil, errFallback
	}
	return f, nil
}

// writeDirect has the agent create the temporary file tmp (tracked by its
// session, so it goes if this client does), then writes first and the rest
// of src into it without the channel (openUploadTemp: the host view, or
// the file the agent passes), kernel to kernel where src is a file.
// errFallback: neither can, and the channel writes it.
func (c *Client) writeDirect(ctx context.Context, tmp string, args *protocol.FileWriteArgs, first []byte, src chunkSource) (int64, error) {
	a := *args
	a.Path, a.Offset, a.Temp = tmp, 0, true
	f, err := c.openUploadTemp(ctx, &a)
	if err != nil {
		return 0, err
	}
	var rest io.Reader = src.r // a regular file: copied by the kernel
	switch {
	case src.r == nil:
		rest = bytes.NewReader(src.data[src.off:])
	case src.ctx != nil:
		rest = sourceReader{&src}
	}
	n, err := copyInto(ctx, f, first, rest)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, errSourceAborted) {
		return n, err
	}
	if err != nil {
		return n, hostError("write", tmp, err)
	}
	return n, nil
}
