// Package search is the agent's search engine: the search command walks a
// tree inside the neuron and greps it, so that searching works the same in
// every image (busybox, distroless, Debian) without grep, find or rg there.
//
// One walker goroutine lists directories depth-first in name order, applies
// .gitignore files, the hidden rule and the globs, and numbers the files it
// hands on in that order; GOMAXPROCS workers open, read and scan them; the
// request's goroutine puts their results back in the walker's order, which
// is the order of the result, and stops the search once it has enough.
// Directories are opened beneath their parent with O_NOFOLLOW, so a symlink
// never leads the walk into another directory (no loops, no way out of the
// root); a symlink to a file is read through the confined file system (FS),
// so one that leads out of the root is not read.
//
// It reads the neuron's files only through FS and descriptors opened
// beneath what FS opened; it never resolves a path of its own.
package search

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// maxSearchJSON bounds the encoded result, well inside a frame header.
const maxSearchJSON = 900 << 10

// binaryProbe is how much of a file is looked at for a NUL byte.
const binaryProbe = 8 << 10

// FS is the confined file system a search reads: a path (absolute as the
// neuron sees it, or relative to its working directory) resolved inside the
// neuron's root and never out of it, failing with the protocol's codes
// (PATH_ESCAPE, NOT_FOUND, ...). Both return the path as the neuron sees it.
type FS interface {
	OpenFile(p string, flag int, perm fs.FileMode) (*os.File, string, error)
	Stat(p string, follow bool) (fs.FileInfo, string, error)
}

// searchRun is one search in progress.
type searchRun struct {
	fs      FS
	ctx     context.Context
	args    *protocol.SearchArgs
	mode    string
	limit   int
	maxFile int64
	sc      scanner
	filter  *globFilter
	rootAbs string

	jobs    chan searchJob
	results chan *searchOut
}

// searchDir is an open directory that files still waiting to be opened
// beneath it hold a reference to.
type searchDir struct {
	f    *os.File
	fd   int
	refs atomic.Int32
}

func (d *searchDir) release() {
	if d.refs.Add(-1) == 0 {
		d.f.Close() // read-only directory: nothing to lose
	}
}

type searchJob struct {
	seq  int
	dir  *searchDir
	name string
	rel  string
	link bool // a symlink: read through the confined file system
}

// searchOut is what a worker found in one file.
type searchOut struct {
	seq     int
	rel     string
	scanned bool
	binary  bool
	regular bool  // find mode: the path is (or links to) a regular file
	mtime   int64 // find mode: its modification time, ns
	scan    fileScan
}

// Run runs the search args asks for in fsys; ctx ending ends it with
// TIMEOUT.
func Run(ctx context.Context, fsys FS, args *protocol.SearchArgs) (*protocol.SearchResult, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	r := &searchRun{fs: fsys, args: args, mode: args.Mode}
	if r.mode == "" {
		r.mode = protocol.SearchModeContent
	}
	var lineChars int
	r.limit, lineChars, r.maxFile = args.Limits()
	if r.mode != protocol.SearchModeFind {
		m, err := newLineMatcher(args.Pattern, args.Literal, args.IgnoreCase)
		if err != nil {
			return nil, err
		}
		// One more than wanted, to know whether results were left out.
		r.sc = scanner{m: m, mode: r.mode, context: args.Context, limit: r.limit + 1, lineChars: lineChars}
	}
	var err error
	if r.filter, err = newGlobFilter(args.Glob, args.Type); err != nil {
		return nil, err
	}
	root, abs, err := fsys.OpenFile(args.Path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	r.rootAbs = abs
	st, err := root.Stat()
	if err != nil {
		root.Close()
		return nil, protocol.Errorf(protocol.CodeInternal, "stat %s: %v", abs, err)
	}
	switch {
	case st.Mode().IsRegular():
		defer root.Close()
		return r.searchFile(ctx, root, st)
	case !st.IsDir():
		root.Close()
		return nil, protocol.Errorf(protocol.CodeBadRequest, "search %s: not a regular file or a directory", abs)
	}
	res := r.searchTree(ctx, root)
	if err := ctx.Err(); err != nil {
		return nil, protocol.Errorf(protocol.CodeTimeout, "search %s: %v (give a narrower path, glob or type)", abs, err)
	}
	return res, nil
}

// searchFile searches a single file, reported by the path it was given.
func (r *searchRun) searchFile(ctx context.Context, f *os.File, st fs.FileInfo) (*protocol.SearchResult, error) {
	r.ctx = ctx
	out := &searchOut{rel: r.args.Path}
	if r.mode == protocol.SearchModeFind {
		out.regular = true
	} else {
		buf := getSearchBuf()
		defer putSearchBuf(buf)
		r.scanFD(int(f.Fd()), st.Size(), out, buf)
	}
	var c searchCollector
	c.init(r)
	c.add(out)
	return c.finish(), nil
}

func (r *searchRun) searchTree(ctx context.Context, root *os.File) *protocol.SearchResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.ctx = ctx
	workers := runtime.GOMAXPROCS(0)
	r.jobs = make(chan searchJob, 256)
	r.results = make(chan *searchOut, 256)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(r.jobs)
		d := &searchDir{f: root, fd: int(root.Fd())}
		d.refs.Store(1)
		seq := 0
		r.walk(d, "", nil, &seq)
	})
	var busy sync.WaitGroup
	for range workers {
		busy.Go(r.work)
	}
	wg.Go(func() {
		busy.Wait()
		close(r.results)
	})
	var c searchCollector
	c.init(r)
	var pending []*searchOut // by sequence number, from c.next on
	stopped := false
	for out := range r.results {
		if stopped {
			continue // drain: the workers finish what they hold
		}
		for len(pending) <= out.seq-c.next {
			pending = append(pending, nil)
		}
		pending[out.seq-c.next] = out
		for len(pending) > 0 && pending[0] != nil {
			o := pending[0]
			pending = pending[1:]
			c.next++
			if !c.add(o) {
				stopped = true
				cancel()
				break
			}
		}
	}
	wg.Wait()
	return c.finish()
}

// walk lists the directory d (at rel below the root) in name order and
// hands its files on, entering its subdirectories as it meets them. It
// gives back the walker's reference to d.
func (r *searchRun) walk(d *searchDir, rel string, ign *ignoreFile, seq *int) {
	defer d.release()
	entries, _ := d.f.ReadDir(-1) // an unreadable directory is skipped, as rg does; whatever was read is searched
	slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	if !r.args.NoIgnore {
		for _, e := range entries {
			if e.Name() == ".gitignore" && e.Type().IsRegular() {
				if data, ok := readAt(d.fd, ".gitignore", 1<<20); ok {
					ign = parseIgnore(data, rel, ign)
				}
				break
			}
		}
	}
	for _, e := range entries {
		if r.ctx.Err() != nil {
			return
		}
		name := e.Name()
		if name == ".git" || (!r.args.Hidden && name[0] == '.') {
			continue
		}
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		t := e.Type()
		switch {
		case t.IsDir():
			if ign.ignored(child, name, true) || !r.filter.enter(child, name) {
				continue
			}
			fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // unreadable, or replaced by a symlink since the listing
			}
			sub := &searchDir{f: os.NewFile(uintptr(fd), child), fd: fd}
			sub.refs.Store(1)
			r.walk(sub, child, ign, seq)
		case t.IsRegular() || t&fs.ModeSymlink != 0:
			if ign.ignored(child, name, false) || !r.filter.keep(child, name) {
				continue
			}
			d.refs.Add(1)
			select {
			case r.jobs <- searchJob{seq: *seq, dir: d, name: name, rel: child, link: t&fs.ModeSymlink != 0}:
				*seq++
			case <-r.ctx.Done():
				d.release()
				return
			}
		}
	}
}

// work opens, reads and scans files until the walker is done.
func (r *searchRun) work() {
	buf := getSearchBuf()
	defer putSearchBuf(buf)
	for j := range r.jobs {
		out := &searchOut{seq: j.seq, rel: j.rel}
		if r.ctx.Err() == nil {
			r.file(j, out, buf)
		} else {
			j.dir.release()
		}
		r.results <- out
	}
}

// file looks at one file of the walk; it gives back the job's reference to
// its directory.
func (r *searchRun) file(j searchJob, out *searchOut, buf *[]byte) {
	if j.link {
		j.dir.release()
		r.linkedFile(j, out, buf)
		return
	}
	if r.mode == protocol.SearchModeFind {
		var st unix.Stat_t
		err := unix.Fstatat(j.dir.fd, j.name, &st, unix.AT_SYMLINK_NOFOLLOW)
		j.dir.release()
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			out.regular, out.mtime = true, st.Mtim.Nano()
		}
		return
	}
	fd, err := unix.Openat(j.dir.fd, j.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	j.dir.release()
	if err != nil {
		return // unreadable, or gone since the listing
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	r.scanFD(fd, st.Size, out, buf)
}

// linkedFile follows a symlink met in the walk through the confined file
// system: a link that leads out of the root, or to a directory, is passed by.
func (r *searchRun) linkedFile(j searchJob, out *searchOut, buf *[]byte) {
	p := r.rootAbs + "/" + j.rel
	if r.mode == protocol.SearchModeFind {
		if st, _, err := r.fs.Stat(p, true); err == nil && st.Mode().IsRegular() {
			out.regular, out.mtime = true, st.ModTime().UnixNano()
		}
		return
	}
	f, _, err := r.fs.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return
	}
	r.scanFD(int(f.Fd()), st.Size(), out, buf)
}

// scanFD reads the regular file fd (size bytes by its stat) and scans it.
func (r *searchRun) scanFD(fd int, size int64, out *searchOut, buf *[]byte) {
	if size > r.maxFile {
		return
	}
	data, ok := readFD(fd, size, r.maxFile, buf)
	if !ok {
		return
	}
	out.scanned = true
	if bytes.IndexByte(data[:min(len(data), binaryProbe)], 0) >= 0 {
		out.binary = true
		return
	}
	r.sc.scan(data, out.rel, &out.scan)
}

// readFD reads all of fd into *buf (growing it), failing for more than max bytes.
func readFD(fd int, size, limit int64, buf *[]byte) ([]byte, bool) {
	// One byte more than the size, so that the read that finds the end
	// does not need a larger buffer.
	want := int(min(size, limit)) + 1
	if cap(*buf) < want {
		*buf = make([]byte, max(want, 64<<10))
	}
	b := (*buf)[:cap(*buf)]
	n := 0
	for {
		if n == len(b) {
			if int64(n) > limit {
				return nil, false
			}
			nb := make([]byte, min(2*len(b), int(limit)+1))
			copy(nb, b[:n])
			*buf, b = nb, nb
		}
		k, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if k == 0 {
			break
		}
		n += k
	}
	if int64(n) > limit {
		return nil, false
	}
	return b[:n], true
}

// readAt reads the small file name beneath the directory fd.
func readAt(dirfd int, name string, limit int64) ([]byte, bool) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > limit {
		return nil, false
	}
	var b []byte
	data, ok := readFD(fd, st.Size, limit, &b)
	return bytes.Clone(data), ok
}

var searchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func getSearchBuf() *[]byte { return searchBufs.Get().(*[]byte) }

func putSearchBuf(b *[]byte) {
	if cap(*b) <= 1<<20 {
		searchBufs.Put(b) // a buffer grown for a big file is left to the collector
	}
}

// searchCollector builds the result from the files' findings in path order.
type searchCollector struct {
	r       *searchRun
	res     *protocol.SearchResult
	next    int   // sequence number of the next file to add
	budget  int   // bytes of JSON left
	matches int   // matching lines taken (content mode)
	last    match // the last matching line taken
	found   []*searchOut
}

type match struct {
	path string
	line int
}

func (c *searchCollector) init(r *searchRun) {
	c.r, c.res, c.budget = r, &protocol.SearchResult{}, maxSearchJSON
}

// add takes one file's findings; false means the result is complete.
func (c *searchCollector) add(o *searchOut) bool {
	res := c.res
	if o.scanned {
		res.FilesScanned++
	}
	if o.binary {
		res.SkippedBinary++
	}
	switch c.r.mode {
	case protocol.SearchModeFind:
		if o.regular {
			res.FilesScanned++
			c.found = append(c.found, o)
		}
	case protocol.SearchModeFiles:
		if o.scan.any {
			return c.take(len(res.Files) < c.r.limit, jsonLen(o.rel)+3, func() { res.Files = append(res.Files, o.rel) })
		}
	case protocol.SearchModeCount:
		if o.scan.any {
			return c.take(len(res.Counts) < c.r.limit, jsonLen(o.rel)+40, func() {
				res.Counts = append(res.Counts, protocol.SearchCount{Path: o.rel, Count: o.scan.count})
			})
		}
	default:
		for _, m := range o.scan.matches {
			if m.Context {
				// Context after the last match taken is kept; context
				// before one that is not is not.
				if c.matches == c.r.limit && (m.Path != c.last.path || m.Line > c.last.line+c.r.args.Context) {
					continue
				}
			} else if c.matches == c.r.limit {
				res.Truncated = true
				return false
			}
			if !c.take(true, jsonLen(m.Path)+jsonLen(m.Text)+50, func() { res.Matches = append(res.Matches, m) }) {
				return false
			}
			if !m.Context {
				c.matches++
				c.last = match{m.Path, m.Line}
			}
		}
	}
	return true
}

// take adds an entry of n JSON bytes if there is room for it (and more
// are wanted), or marks the result truncated.
func (c *searchCollector) take(wanted bool, n int, add func()) bool {
	if !wanted || n > c.budget {
		c.res.Truncated = true
		return false
	}
	c.budget -= n
	add()
	return true
}

func (c *searchCollector) finish() *protocol.SearchResult {
	if c.r.mode == protocol.SearchModeFind {
		// Newest first, as an agent most often wants what changed last;
		// ties (files written together) in path order.
		slices.SortStableFunc(c.found, func(x, y *searchOut) int {
			switch {
			case x.mtime > y.mtime:
				return -1
			case x.mtime < y.mtime:
				return 1
			}
			return 0
		})
		for _, o := range c.found {
			if !c.take(len(c.res.Files) < c.r.limit, jsonLen(o.rel)+3, func() { c.res.Files = append(c.res.Files, o.rel) }) {
				break
			}
		}
	}
	return c.res
}

// jsonLen is the length of s as a JSON string's contents (encoding/json
// escapes <, > and &, control characters, U+2028 and U+2029, and replaces
// invalid UTF-8).
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
