package ctxfs

import (
	"bytes"
	"context"
	"io"
	iofs "io/fs"
	"time"
)

// FS returns the tree as an io/fs.FS seen by caller: what a mount shows
// that uid, without a mount (tests, tools).
func (t *Tree) FS(caller Caller) iofs.FS { return &treeFS{t: t, c: caller} }

type treeFS struct {
	t *Tree
	c Caller
}

func (f *treeFS) Open(name string) (iofs.File, error) {
	if !iofs.ValidPath(name) {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: iofs.ErrInvalid}
	}
	ctx := context.Background()
	r, err := f.t.resolve(ctx, f.c, name)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: fsErr(err)}
	}
	info, err := f.t.stat(ctx, r)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: fsErr(err)}
	}
	if info.Dir {
		return &dirFile{f: f, r: r, info: info}, nil
	}
	var b []byte
	if r.kind.growing() {
		b = make([]byte, info.Size)
		n, err := f.t.readAt(ctx, r, b, 0)
		if err != nil {
			return nil, &iofs.PathError{Op: "open", Path: name, Err: fsErr(err)}
		}
		b = b[:n]
	} else if b, err = f.t.content(ctx, r); err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: fsErr(err)}
	}
	return &regFile{Reader: bytes.NewReader(b), info: info}, nil
}

func fsErr(err error) error {
	switch Errno(err) {
	case 2: // ENOENT
		return iofs.ErrNotExist
	case 13: // EACCES
		return iofs.ErrPermission
	}
	return err
}

// fileInfo adapts Info.
type fileInfo struct{ i Info }

func (fi fileInfo) Name() string { return fi.i.Name }
func (fi fileInfo) Size() int64  { return fi.i.Size }
func (fi fileInfo) Mode() iofs.FileMode {
	if fi.i.Dir {
		return iofs.ModeDir | fi.i.Perm
	}
	return fi.i.Perm
}
func (fi fileInfo) ModTime() time.Time           { return fi.i.ModTime }
func (fi fileInfo) IsDir() bool                  { return fi.i.Dir }
func (fi fileInfo) Sys() any                     { return fi.i }
func (fi fileInfo) Type() iofs.FileMode          { return fi.Mode().Type() }
func (fi fileInfo) Info() (iofs.FileInfo, error) { return fi, nil }
func (fi fileInfo) String() string               { return iofs.FormatFileInfo(fi) }
func (f *regFile) Stat() (iofs.FileInfo, error)  { return fileInfo{f.info}, nil }
func (f *regFile) Close() error                  { return nil }
func (d *dirFile) Stat() (iofs.FileInfo, error)  { return fileInfo{d.info}, nil }
func (d *dirFile) Close() error                  { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &iofs.PathError{Op: "read", Path: d.info.Name, Err: iofs.ErrInvalid}
}

type regFile struct {
	*bytes.Reader
	info Info
}

type dirFile struct {
	f    *treeFS
	r    *ref
	info Info
	ents []iofs.DirEntry
	read bool
}

func (d *dirFile) ReadDir(n int) ([]iofs.DirEntry, error) {
	if !d.read {
		_, infos, err := d.f.t.children(context.Background(), d.f.c, d.r)
		if err != nil {
			return nil, err
		}
		for _, i := range infos {
			d.ents = append(d.ents, fileInfo{i})
		}
		d.read = true
	}
	if n <= 0 {
		out := d.ents
		d.ents = nil
		return out, nil
	}
	if len(d.ents) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(d.ents))
	out := d.ents[:n]
	d.ents = d.ents[n:]
	return out, nil
}
