//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

func (a *Agent) fileWrite(req *request) (any, []byte, error) {
	var args protocol.FileWriteArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	switch {
	case args.Offset < 0:
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_write %s: negative offset %d", args.Path, args.Offset)
	case args.Truncate && args.Offset != 0:
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_write %s: truncate needs offset 0", args.Path)
	case args.Atomic && (args.Offset != 0 || args.Append):
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_write %s: atomic writes replace the whole file (no offset, no append)", args.Path)
	case args.PassFile && (!args.Temp || args.Offset != 0 || args.Append || args.Atomic || len(req.body) > 0 || !req.s.passFiles()):
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_write %s: only an upload's new temporary file is passed, and only on a Unix socket", args.Path)
	}
	perm := fs.FileMode(args.Mode & 0o7777)
	if perm == 0 {
		perm = 0o644
	}
	if args.Parents {
		if _, err := a.fs.mkdir(parentOf(args.Path), true, 0o755); err != nil {
			return nil, nil, err
		}
	}
	if args.Atomic {
		return a.writeAtomic(args.Path, req.body, perm)
	}
	flag := os.O_WRONLY | os.O_CREATE
	if args.Truncate {
		flag |= os.O_TRUNC
	}
	if args.Append {
		flag |= os.O_APPEND
	}
	f, abs, err := a.fs.openFile(args.Path, flag, perm)
	if err != nil {
		return nil, nil, err
	}
	if args.Temp {
		req.s.trackTemp(abs)
	}
	if args.PassFile {
		return passFile(f, abs, &protocol.FileWriteResult{}) // it owns f
	}
	defer f.Close()
	var n int
	if args.Append {
		n, err = f.Write(req.body)
	} else {
		n, err = f.WriteAt(req.body, args.Offset)
	}
	if err != nil {
		return nil, nil, pathError("write", abs, err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, nil, pathError("stat", abs, err)
	}
	if err := f.Close(); err != nil {
		return nil, nil, pathError("write", abs, err)
	}
	res := &protocol.FileWriteResult{Written: n, Size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		res.Ino = sys.Ino
	}
	return res, nil, nil
}

// writeAtomic writes data to a temporary file beside p and renames it over p.
func (a *Agent) writeAtomic(p string, data []byte, perm fs.FileMode) (any, []byte, error) {
	// Write through a symlink to its target, as `echo > link` would, rather
	// than replacing the link; a link that leads out is refused.
	abs, _, err := a.fs.resolve(p)
	if err != nil {
		return nil, nil, err
	}
	if st, _, err := a.fs.stat(abs, true); err == nil {
		if st.IsDir() {
			return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "write %s: is a directory", abs)
		}
		perm = st.Mode().Perm() // keep the mode of the file being replaced
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".cortex-"+hex.EncodeToString(rnd[:]))
	f, _, err := a.fs.openFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, nil, err
	}
	_, werr := f.Write(data)
	var mtime time.Time
	if st, err := f.Stat(); err == nil {
		mtime = st.ModTime() // the rename below keeps it
	}
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = a.fs.rename(tmp, abs)
	}
	if werr != nil {
		a.fs.remove(tmp, false) // best effort: the temporary file is ours
		return nil, nil, pathError("write", abs, werr)
	}
	return &protocol.FileWriteResult{Written: len(data), Size: int64(len(data)), ModTime: mtime}, nil, nil
}

// passFile answers with f itself (see protocol.CapPassFiles), a regular
// file, its size set in res: a *FileWriteResult (with its inode) or a
// *FileReadResult.
func passFile(f *os.File, abs string, res any) (any, []byte, error) {
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = protocol.Errorf(protocol.CodeBadRequest, "%s is not a regular file", abs)
	}
	if err == nil {
		err = clearNonblock(f)
	}
	if err != nil {
		f.Close()
		return nil, nil, pathError("open", abs, err)
	}
	switch r := res.(type) {
	case *protocol.FileWriteResult:
		r.Size = st.Size()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			r.Ino = sys.Ino
		}
	case *protocol.FileReadResult:
		r.Size = st.Size()
	}
	return &passedFile{res: res, f: f}, nil, nil
}

// clearNonblock makes f's reads block again once it is known to be a
// regular file (they never wait on one anyway).
func clearNonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}

// parentOf returns the directory part of p without cleaning it, so that a
// ".." in it keeps its meaning after the symlinks before it.
func parentOf(p string) string {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0:
		return "."
	case i == 0:
		return "/"
	}
	return p[:i]
}

func (a *Agent) fileRead(req *request) (any, []byte, error) {
	var args protocol.FileReadArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if args.Offset < 0 || args.Length < 0 {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_read %s: negative offset or length", args.Path)
	}
	length := args.Length
	if length == 0 {
		length = protocol.ChunkSize
	}
	if limit := req.maxBody(); length > limit {
		return nil, nil, protocol.Errorf(protocol.CodeTooLarge, "file_read %s: length %d exceeds %d; read in chunks", args.Path, length, limit)
	}
	if args.PassFile {
		if !req.s.passFiles() {
			return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_read %s: files are passed only on a Unix socket", args.Path)
		}
		// Non-blocking: a FIFO at the path must not hold the open.
		f, abs, err := a.fs.openFile(args.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, nil, err
		}
		return passFile(f, abs, &protocol.FileReadResult{})
	}
	f, abs, err := a.fs.openFile(args.Path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, pathError("stat", abs, err)
	}
	if st.IsDir() {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "read %s: is a directory", abs)
	}
	want := length
	if st.Mode().IsRegular() && st.Size() > 0 {
		want = max(0, min(length, st.Size()-args.Offset))
	} else {
		want = min(length, 64<<10) // /proc files and devices report no size
	}
	buf, release := getBuf(int(want))
	req.after = append(req.after, release) // the response is written from buf
	n, err := f.ReadAt(buf, args.Offset)
	eof := errors.Is(err, io.EOF)
	if err != nil && !eof {
		return nil, nil, pathError("read", abs, err)
	}
	size := st.Size()
	if st.Mode().IsRegular() && size > 0 {
		eof = eof || args.Offset+int64(n) >= size
	}
	// A file that reports no size (/proc) ends only where a read comes back short.
	eof = eof || (n < len(buf) && size == 0)
	return &protocol.FileReadResult{N: n, Size: size, EOF: eof}, buf[:n], nil
}

// maxListBytes bounds the JSON of one file_list page (frames carry 1 MiB headers).
const maxListBytes = 256 << 10

func (a *Agent) fileList(req *request) (any, []byte, error) {
	var args protocol.FileListArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	limit := args.Limit
	if limit <= 0 || limit > protocol.MaxListEntries {
		limit = protocol.MaxListEntries
	}
	if args.Offset < 0 {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_list %s: negative offset", args.Path)
	}
	d, abs, err := a.fs.openFile(args.Path, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, nil, pathError("list", abs, err)
	}
	slices.Sort(names)
	res := &protocol.FileListResult{Path: abs, Total: len(names), Entries: []protocol.FileInfo{}}
	if args.Offset >= len(names) {
		return res, nil, nil
	}
	page := names[args.Offset:]
	if len(page) > limit {
		page, res.More = page[:limit], true
	}
	size := 0
	res.Next = args.Offset
	for _, name := range page {
		fi, err := statAt(d, name)
		if err == nil {
			fi.Path = filepath.Join(abs, name)
			// Keep the page well inside a frame header whatever the names' lengths.
			if size += len(fi.Name) + len(fi.Path) + len(fi.Target) + 128; size > maxListBytes && len(res.Entries) > 0 {
				res.More = true
				break
			}
			res.Entries = append(res.Entries, fi)
		} // else: removed since the listing; leave it out
		res.Next++
	}
	if !res.More {
		res.Next = 0 // nothing more to ask for
	}
	return res, nil, nil
}

func (a *Agent) stat(req *request) (any, []byte, error) {
	var args protocol.StatArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	st, abs, err := a.fs.stat(args.Path, !args.NoFollow)
	if err != nil {
		return nil, nil, err
	}
	fi := infoOf(st)
	fi.Path = abs
	if fi.Type == protocol.TypeSymlink {
		fi.Target, _ = a.fs.readlink(abs) // the stat succeeded; a vanished link just has no target
	}
	return &fi, nil, nil
}

func (a *Agent) fileExists(req *request) (any, []byte, error) {
	var args protocol.PathArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	st, _, err := a.fs.stat(args.Path, true)
	if protocol.HasCode(err, protocol.CodeNotFound) {
		return &protocol.ExistsResult{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return &protocol.ExistsResult{Exists: true, Type: typeOf(st.Mode())}, nil, nil
}

func (a *Agent) mkdir(req *request) (any, []byte, error) {
	var args protocol.MkdirArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	perm := fs.FileMode(args.Mode & 0o7777)
	if perm == 0 {
		perm = 0o755
	}
	abs, err := a.fs.mkdir(args.Path, !args.NoParents, perm)
	if err != nil {
		return nil, nil, err
	}
	return &protocol.PathArgs{Path: abs}, nil, nil
}

func (a *Agent) resolvePath(req *request) (any, []byte, error) {
	var args protocol.PathArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, exists, err := a.fs.resolve(args.Path)
	if err != nil {
		return nil, nil, err
	}
	return &protocol.ResolveResult{Path: p, Exists: exists}, nil, nil
}

func (a *Agent) fileRemove(req *request) (any, []byte, error) {
	var args protocol.RemoveArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	abs, err := a.fs.remove(args.Path, args.Recursive)
	if err != nil {
		return nil, nil, err
	}
	return &protocol.PathArgs{Path: abs}, nil, nil
}

func (a *Agent) fileMove(req *request) (any, []byte, error) {
	var args protocol.MoveArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if args.From == "" || args.To == "" {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_move: give both from and to")
	}
	if _, _, err := a.fs.stat(args.From, false); err != nil {
		return nil, nil, err
	}
	if args.Parents {
		if _, err := a.fs.mkdir(parentOf(args.To), true, 0o755); err != nil {
			return nil, nil, err
		}
	}
	move := a.fs.rename
	if args.NoReplace {
		move = a.fs.renameNoReplace
	}
	if err := move(args.From, args.To); err != nil {
		return nil, nil, err
	}
	if from, err := a.fs.abs(args.From); err == nil {
		req.s.untrackTemp(from) // an upload's temporary file has reached its place
	}
	to, _ := a.fs.abs(args.To) // rename succeeded, so the path is valid
	return &protocol.PathArgs{Path: to}, nil, nil
}

func typeOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return protocol.TypeFile
	case m.IsDir():
		return protocol.TypeDir
	case m&fs.ModeSymlink != 0:
		return protocol.TypeSymlink
	}
	return protocol.TypeOther
}

func infoOf(st fs.FileInfo) protocol.FileInfo {
	return protocol.FileInfo{Name: st.Name(), Type: typeOf(st.Mode()), Size: st.Size(),
		Mode: uint32(st.Mode().Perm()), ModTime: st.ModTime().UTC()}
}

func (a *Agent) symlink(req *request) (any, []byte, error) {
	var args protocol.SymlinkArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if args.Target == "" || strings.IndexByte(args.Target, 0) >= 0 {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "file_symlink %s: the target is empty or holds a NUL byte", args.Path)
	}
	abs, err := a.fs.symlink(args.Target, args.Path)
	if err != nil {
		return nil, nil, err
	}
	return &protocol.PathArgs{Path: abs}, nil, nil
}
