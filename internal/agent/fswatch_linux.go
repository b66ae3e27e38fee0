package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// maxFsWatches bounds the watches open in one agent at once.
const maxFsWatches = 32

// fsWatchMask is what a watch asks the kernel for, per directory.
const fsWatchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// fsWatch serves fs_watch (protocol.FsWatchArgs): the changes of a
// directory, from inotify, as StreamFs data (each FsEvent's JSON on a
// line of its own), under the request's flow control: a host that does not read
// holds the agent back, the kernel's queue overflows, and the watch ends
// saying so. No symlink is followed: the watched directory's parent is
// found beneath the neuron's root as for every fs command, and it and each
// directory under it are opened with O_NOFOLLOW from their parent and
// watched through the descriptor, so the watch is on what was opened,
// whatever a name points at later.
func (a *Agent) fsWatch(req *request) (any, []byte, error) {
	var args protocol.FsWatchArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	// Each watch is an inotify instance of this uid's few (128 by
	// default): a neuron's hosts get a share, not all of them.
	if n := a.fsWatches.Add(1); n > maxFsWatches {
		a.fsWatches.Add(-1)
		return nil, nil, protocol.Errorf(protocol.CodeTooLarge, "fs_watch %s: %d watches are open in this neuron already: end one", args.Path, maxFsWatches)
	}
	defer a.fsWatches.Add(-1)
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "fs_watch: inotify: %v", err)
	}
	f := os.NewFile(uintptr(ifd), "inotify")
	defer f.Close()
	w := &fsWatcher{a: a, fd: ifd, root: args.Path, recursive: args.Recursive, dirs: map[int32]string{}}
	if err := w.start(); err != nil {
		return nil, nil, err
	}
	if err := req.event(protocol.StreamReady, struct{}{}); err != nil {
		return nil, nil, err
	}
	// A host that cancels (or a session that ends) ends a read that waits.
	stop := context.AfterFunc(req.ctx, func() { f.Close() })
	defer stop()
	var off int64
	buf := make([]byte, 64<<10)
	for {
		n, rerr := f.Read(buf)
		if rerr != nil {
			if req.ctx.Err() != nil {
				return struct{}{}, nil, nil
			}
			return nil, nil, protocol.Errorf(protocol.CodeInternal, "fs_watch %s: reading inotify: %v", args.Path, rerr)
		}
		evs, done, err := w.parse(buf[:n])
		for _, ev := range evs {
			b, _ := json.Marshal(ev)
			b = append(b, '\n') // a piece of the stream may split an event: lines say where each ends
			if serr := req.send(protocol.StreamFs, off, b); serr != nil {
				return nil, nil, serr
			}
			off += int64(len(b))
		}
		if err != nil {
			return nil, nil, err
		}
		if done {
			return struct{}{}, nil, nil
		}
	}
}

// fsWatcher is one fs_watch's inotify instance and its directories.
type fsWatcher struct {
	a         *Agent
	fd        int    // the inotify instance
	root      string // the watched directory as the host named it
	dev, ino  uint64 // and what it is
	recursive bool
	dirs      map[int32]string // watch descriptor -> directory, relative to root ("" is root)
}

// start watches the directory, and with recursive every one under it.
// It does not hold it open: an open descriptor would keep a removed
// directory's inode, and so its IN_DELETE_SELF, from the watch.
func (w *fsWatcher) start() error {
	top, err := w.a.openWatched(w.root)
	if err != nil {
		return err
	}
	defer top.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(top.Fd()), &st); err != nil {
		return pathError("fs_watch", w.root, err)
	}
	w.dev, w.ino = st.Dev, st.Ino
	return w.watch(top, "")
}

// openWatched opens the directory p names: its parent is found as every
// fs command finds a path (beneath the neuron's root), its last component
// opened from there without following a symlink.
func (a *Agent) openWatched(p string) (*os.File, error) {
	abs, err := a.fs.abs(p)
	if err != nil {
		return nil, err
	}
	if b := filepath.Base(p); abs == a.fs.root || b == "." || b == ".." || b == "/" {
		d, _, err := a.fs.openFile(p, os.O_RDONLY|syscall.O_DIRECTORY, 0) // none is a symlink
		return d, err
	}
	parent, base, err := a.fs.openParent(p)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	d, err := openDirAt(parent, base)
	if err == nil {
		return d, nil
	}
	var st unix.Stat_t
	if errors.Is(err, unix.ENOTDIR) && unix.Fstatat(int(parent.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "fs_watch %s: is a symlink, which a watch does not follow: watch the directory it points at", abs)
		}
		return nil, protocol.Errorf(protocol.CodeBadRequest, "fs_watch %s: not a directory", abs)
	}
	return nil, pathError("fs_watch", abs, err)
}

// openDirAt opens the directory name in dir, not following a symlink
// (ENOTDIR for one, as for a file).
func openDirAt(dir *os.File, name string) (*os.File, error) {
	for {
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), nil
	}
}

// add watches directory rel, newly come under the watched one (and with
// recursive every directory under it). It is opened one component at a
// time from the watched directory, following no symlink and no "..", so
// what is watched is what is under it, whatever names point at.
func (w *fsWatcher) add(rel string) error {
	// The watched directory is found by its name again, and must still be
	// the one watched. When it is not, it was removed or moved, and its
	// own event ends the watch (had an ancestor moved instead, directories
	// that appear from then on go unwatched: the watch has no name for them).
	d, err := w.a.openWatched(w.root)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(int(d.Fd()), &st) != nil || st.Dev != w.dev || st.Ino != w.ino {
		d.Close()
		return nil
	}
	for _, name := range strings.Split(rel, "/") {
		next, err := openDirAt(d, name)
		d.Close()
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil // gone, or no longer a directory: that comes as an event of its own
		}
		if err != nil {
			return pathError("fs_watch", path.Join(w.root, rel), err)
		}
		d = next
	}
	defer d.Close()
	return w.watch(d, rel)
}

// watch watches the open directory d, rel under the watched one, and with
// recursive every directory under it.
func (w *fsWatcher) watch(d *os.File, rel string) error {
	if len(w.dirs) >= protocol.MaxWatchDirs {
		return protocol.Errorf(protocol.CodeTooLarge, "fs_watch %s: more than %d directories to watch: watch a smaller tree, or not recursively", w.root, protocol.MaxWatchDirs)
	}
	// inotify takes a name, not a descriptor: /proc/self/fd names what was opened.
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), fsWatchMask)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return protocol.Errorf(protocol.CodeTooLarge, "fs_watch %s: the kernel's inotify watches are used up (fs.inotify.max_user_watches)", w.root)
		}
		return pathError("fs_watch", path.Join(w.root, rel), err)
	}
	w.dirs[int32(wd)] = rel
	if !w.recursive {
		return nil
	}
	ents, err := d.ReadDir(-1)
	if err != nil {
		return pathError("fs_watch", path.Join(w.root, rel), err)
	}
	for _, e := range ents {
		if !e.IsDir() { // a symlink to a directory is not one: not followed
			continue
		}
		sub, err := openDirAt(d, e.Name())
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue // gone since the listing: its removal comes as an event
		}
		if err != nil {
			return pathError("fs_watch", path.Join(w.root, rel, e.Name()), err)
		}
		err = w.watch(sub, path.Join(rel, e.Name()))
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// forget stops watching directory rel and every directory under it.
func (w *fsWatcher) forget(rel string) {
	for wd, d := range w.dirs {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
}

// parse reads the kernel's events in b; done when the watched directory
// itself went.
func (w *fsWatcher) parse(b []byte) (evs []protocol.FsEvent, done bool, err error) {
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(raw.Len)
		if size > len(b) {
			break
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:size], "\x00"))
		b = b[size:]
		mask := raw.Mask
		if mask&unix.IN_Q_OVERFLOW != 0 {
			return evs, false, protocol.Errorf(protocol.CodeTooLarge, "fs_watch %s: changes came faster than they were read, and some were lost: watch again", w.root)
		}
		dir, ok := w.dirs[raw.Wd]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, raw.Wd)
			if dir == "" {
				return evs, true, nil
			}
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if dir == "" {
				return evs, true, nil // the watched directory went
			}
			if mask&unix.IN_MOVE_SELF != 0 {
				w.forget(dir) // moved away: what happens there is not the watch's
			}
			continue // its removal or move came as its parent's event
		}
		if name == "" {
			continue
		}
		rel := path.Join(dir, name)
		var op string
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			op = protocol.FsCreate
			if w.recursive && mask&unix.IN_ISDIR != 0 {
				if err := w.add(rel); err != nil {
					return evs, false, err
				}
			}
		case mask&unix.IN_DELETE != 0:
			op = protocol.FsRemove
		case mask&unix.IN_MOVED_FROM != 0:
			op = protocol.FsRename
			if mask&unix.IN_ISDIR != 0 {
				w.forget(rel)
			}
		case mask&unix.IN_MODIFY != 0:
			op = protocol.FsWrite
		case mask&unix.IN_ATTRIB != 0:
			op = protocol.FsChmod
		default:
			continue
		}
		evs = append(evs, protocol.FsEvent{Name: rel, Op: op})
	}
	return evs, false, nil
}
