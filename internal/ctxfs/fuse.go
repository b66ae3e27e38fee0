package ctxfs

import (
	"context"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Kernel cache lifetimes. Entries and attributes of generated files may be
// a second old (the model's own freshness); growing files are re-statted
// every time so tail -f sees them grow; failed lookups are not cached
// because neurons and processes appear at any time.
const (
	entryTTL = time.Second
	attrTTL  = time.Second
	// growPoll is how often an open growing file is checked for growth.
	growPoll = 200 * time.Millisecond
)

// fuseFS is the state the nodes of one mount share.
type fuseFS struct {
	t *Tree

	mu      sync.Mutex
	watches map[uint64]*watch // by inode number
}

// node is one path of the tree in the kernel's inode table.
type node struct {
	fs.Inode
	f    *fuseFS
	path string
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeOpendirer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
	_ fs.NodeWriter    = (*node)(nil)
	_ fs.NodeFlusher   = (*node)(nil)
	_ fs.NodeReleaser  = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
)

// handle is an open file: the content of a generated file as it was at
// open (so that reads at offsets agree), or a growing file's ref.
type handle struct {
	r    *ref
	data []byte
}

func caller(ctx context.Context) Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		return Caller{UID: c.Uid, GID: c.Gid}
	}
	return Caller{}
}

func fillAttr(i *Info, a *fuse.Attr) {
	a.Ino = i.Ino
	a.Mode = uint32(i.Perm)
	if i.Dir {
		a.Mode |= syscall.S_IFDIR
		a.Nlink = 2
	} else {
		a.Mode |= syscall.S_IFREG
		a.Nlink = 1
	}
	a.Size = uint64(max(i.Size, 0))
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.Uid, a.Gid = i.UID, i.GID
	t := i.ModTime
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	a.SetTimes(&t, &t, &t)
}

func attrTTLOf(i *Info) time.Duration {
	if i.Growing || !i.Dir && i.Size == 0 {
		return 0
	}
	return attrTTL
}

func (n *node) resolve(ctx context.Context) (*ref, syscall.Errno) {
	r, err := n.f.t.resolve(ctx, caller(ctx), n.path)
	if err != nil {
		return nil, Errno(err)
	}
	return r, 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p := path.Join(n.path, name)
	r, err := n.f.t.resolve(ctx, caller(ctx), p)
	if err != nil {
		return nil, Errno(err)
	}
	info, err := n.f.t.stat(ctx, r)
	if err != nil {
		return nil, Errno(err)
	}
	fillAttr(&info, &out.Attr)
	out.SetEntryTimeout(entryTTL)
	out.SetAttrTimeout(attrTTLOf(&info))
	mode := uint32(syscall.S_IFREG)
	if info.Dir {
		mode = syscall.S_IFDIR
	}
	ch := n.NewInode(ctx, &node{f: n.f, path: p}, fs.StableAttr{Mode: mode, Ino: info.Ino})
	return ch, 0
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r, errno := n.resolve(ctx)
	if errno != 0 {
		return errno
	}
	info, err := n.f.t.stat(ctx, r)
	if err != nil {
		return Errno(err)
	}
	fillAttr(&info, &out.Attr)
	out.SetTimeout(attrTTLOf(&info))
	return 0
}

// Setattr allows only the truncation a shell's > does on a writable file.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	r, errno := n.resolve(ctx)
	if errno != 0 {
		return errno
	}
	if !r.kind.writable() {
		return syscall.EACCES
	}
	if _, ok := in.GetUID(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetMode(); ok {
		return syscall.EPERM
	}
	return n.Getattr(ctx, fh, out)
}

func (n *node) Opendir(ctx context.Context) syscall.Errno {
	_, errno := n.resolve(ctx)
	return errno
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	c := caller(ctx)
	r, err := n.f.t.resolve(ctx, c, n.path)
	if err != nil {
		return nil, Errno(err)
	}
	_, infos, err := n.f.t.children(ctx, c, r)
	if err != nil {
		return nil, Errno(err)
	}
	ents := make([]fuse.DirEntry, len(infos))
	for i := range infos {
		ents[i] = fuse.DirEntry{Name: infos[i].Name, Ino: infos[i].Ino, Mode: syscall.S_IFREG}
		if infos[i].Dir {
			ents[i].Mode = syscall.S_IFDIR
		}
	}
	return fs.NewListDirStream(ents), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	c := caller(ctx)
	r, err := n.f.t.resolve(ctx, c, n.path)
	if err != nil {
		return nil, 0, Errno(err)
	}
	acc := int(flags) & syscall.O_ACCMODE
	if acc != syscall.O_RDONLY {
		if !r.kind.writable() {
			return nil, 0, syscall.EACCES
		}
		if n.f.t.o.ReadOnly || (!n.f.t.operator(c) && !n.f.t.neuronWrites.Load()) {
			return nil, 0, syscall.EROFS
		}
	}
	h := &handle{r: r}
	switch {
	case r.kind.growing():
		n.f.follow(n, r)
	case acc != syscall.O_WRONLY:
		if h.data, err = n.f.t.content(ctx, r); err != nil {
			return nil, 0, Errno(err)
		}
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	if h.r.kind.growing() {
		k, err := n.f.t.readAt(ctx, h.r, dest, off)
		if err != nil {
			return nil, Errno(err)
		}
		return fuse.ReadResultData(dest[:k]), 0
	}
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.data)))
	return fuse.ReadResultData(h.data[off:end]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	if err := n.f.t.write(ctx, caller(ctx), h.r, data); err != nil {
		return 0, Errno(err)
	}
	return uint32(len(data)), 0
}

// Flush answers ENOSYS, which the kernel remembers: no FLUSH round trip on
// any later close (writes take effect in Write, so a flush has nothing to do).
func (n *node) Flush(context.Context, fs.FileHandle) syscall.Errno { return syscall.ENOSYS }

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if h, ok := fh.(*handle); ok && h.r.kind.growing() {
		n.f.unfollow(n)
	}
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	return 0
}

// watch follows one growing file while it is open: when its size changes,
// the kernel's attributes are invalidated so that a poller (tail -f) sees
// the new size at once.
type watch struct {
	refs int
	stop chan struct{}
	done chan struct{}
}

func (f *fuseFS) follow(n *node, r *ref) {
	ino := n.StableAttr().Ino
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.watches[ino]; w != nil {
		w.refs++
		return
	}
	w := &watch{refs: 1, stop: make(chan struct{}), done: make(chan struct{})}
	f.watches[ino] = w
	go func() {
		defer close(w.done)
		tick := time.NewTicker(growPoll)
		defer tick.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		last, _, _ := f.t.size(ctx, r)
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			size, _, err := f.t.size(ctx, r)
			if err == nil && size != last {
				last = size
				n.NotifyContent(-1, 0) // attributes only: reads are direct
			}
		}
	}()
}

func (f *fuseFS) unfollow(n *node) {
	ino := n.StableAttr().Ino
	f.mu.Lock()
	w := f.watches[ino]
	if w != nil {
		w.refs--
		if w.refs > 0 {
			w = nil
		} else {
			delete(f.watches, ino)
		}
	}
	f.mu.Unlock()
	if w != nil {
		close(w.stop)
		<-w.done
	}
}

// stopAll ends every watch (at unmount).
func (f *fuseFS) stopAll() {
	f.mu.Lock()
	ws := f.watches
	f.watches = map[uint64]*watch{}
	f.mu.Unlock()
	for _, w := range ws {
		close(w.stop)
		<-w.done
	}
}
