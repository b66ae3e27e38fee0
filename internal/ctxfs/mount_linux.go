package ctxfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
)

// MountOptions shape a mount.
type MountOptions struct {
	// Debug logs every FUSE request.
	Debug bool
}

// Server is a mounted tree.
type Server struct {
	dir  string
	srv  *fuse.Server
	f    *fuseFS
	conn string // the FUSE connection's number
}

// Mount serves t at dir until Unmount. A stale CortexFS mount at dir (its
// server died: ENOTCONN) is cleared first; a live mount there is an error.
// The caller must not touch dir itself while serving it.
func Mount(dir string, t *Tree, o MountOptions) (*Server, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := ClearStale(dir); err != nil {
		return nil, err
	}
	if m, ok := ctxmount.MountAt(dir); ok {
		return nil, fmt.Errorf("mount: %s is already mounted (%s from %s): unmount it first (nsys-cortex umount %s)", dir, m.FSType, m.Source, dir)
	}
	f := &fuseFS{t: t, watches: map[uint64]*watch{}}
	root := &node{f: f, path: ""}
	opts := []string{"default_permissions"} // the kernel enforces the per-path modes and owners
	if t.o.ReadOnly {
		opts = append(opts, "ro")
	}
	zero := time.Duration(0)
	srv, err := fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:    true, // agents run under other uids
			FsName:        ctxmount.FSSource,
			Name:          "cortexfs",
			Options:       opts,
			DisableXAttrs: true,
			DirectMount:   os.Geteuid() == 0, // no fusermount round trip when we may mount
			Debug:         o.Debug,
			MaxReadAhead:  128 << 10,
		},
		NegativeTimeout: &zero,
		NullPermissions: true,
		UID:             t.o.Owner.UID,
		GID:             t.o.Owner.GID,
	})
	if err != nil {
		return nil, fmt.Errorf("mount: FUSE at %s: %w (is /dev/fuse there, and fuse3 installed?)", dir, err)
	}
	conn := ""
	if m, ok := ctxmount.MountAt(dir); ok { // the mount table, not the mount itself
		if _, minor, ok := strings.Cut(m.Dev, ":"); ok {
			conn = minor
		}
	}
	return &Server{dir: dir, srv: srv, f: f, conn: conn}, nil
}

// Abort ends the FUSE connection: every other mount of it (a neuron's
// bind of /ctx) answers ENOTCONN from now on, and Wait returns. For after
// Unmount, when neurons still hold the filesystem.
func (s *Server) Abort() error {
	if s.conn == "" {
		return errors.New("abort: the FUSE connection of " + s.dir + " is not known")
	}
	const ctl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, s.conn)); err != nil {
		// fusectl is not mounted on every system: mount it (root only).
		if merr := unix.Mount("fusectl", ctl, "fusectl", 0, ""); merr != nil {
			return fmt.Errorf("abort: %s has no connection %s, and mounting fusectl failed: %w", ctl, s.conn, merr)
		}
	}
	return os.WriteFile(filepath.Join(ctl, s.conn, "abort"), []byte("1"), 0)
}

// Dir is the mount point.
func (s *Server) Dir() string { return s.dir }

// Wait blocks until the mount is gone.
func (s *Server) Wait() { s.srv.Wait() }

// Unmount ends the mount; a busy mount is detached lazily (it goes away
// when its last user leaves).
func (s *Server) Unmount() error {
	s.f.stopAll()
	err := s.srv.Unmount()
	if err != nil {
		if lerr := lazyUnmount(s.dir); lerr != nil {
			return fmt.Errorf("unmount %s: %w (lazy: %v)", s.dir, err, lerr)
		}
		err = nil
	}
	return err
}

// Unmount unmounts the CortexFS at dir from outside its server: politely,
// then lazily if it is busy.
func Unmount(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	m, ok := ctxmount.MountAt(dir)
	if !ok {
		return fmt.Errorf("umount: nothing is mounted at %s", dir)
	}
	if m.FSType != ctxmount.FSType {
		return fmt.Errorf("umount: %s is a %s mount, not CortexFS: leaving it alone", dir, m.FSType)
	}
	if err := plainUnmount(dir); err == nil {
		return nil
	}
	return lazyUnmount(dir)
}

// ClearStale detaches a CortexFS mount at dir whose server is gone (a
// statfs of it fails with ENOTCONN: statfs always reaches the server,
// where a stat may be answered from the kernel's cache). It does nothing
// to a live mount.
func ClearStale(dir string) error {
	if !Stale(dir) {
		return nil
	}
	if m, ok := ctxmount.MountAt(dir); ok && m.FSType != ctxmount.FSType {
		return fmt.Errorf("mount: %s is a dead %s mount, not CortexFS: unmount it yourself", dir, m.FSType)
	}
	if err := lazyUnmount(dir); err != nil {
		return fmt.Errorf("mount: clearing the stale mount at %s: %w", dir, err)
	}
	return nil
}

// Stale reports whether dir is a FUSE mount whose server is gone.
func Stale(dir string) bool {
	var st syscall.Statfs_t
	return errors.Is(syscall.Statfs(dir, &st), syscall.ENOTCONN)
}

func plainUnmount(dir string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(dir, 0)
	}
	return fusermount("-u", dir)
}

func lazyUnmount(dir string) error {
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err == nil {
			return nil
		}
	}
	return fusermount("-uz", dir)
}

func fusermount(flag, dir string) error {
	bin := "fusermount3"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "fusermount"
	}
	out, err := exec.Command(bin, flag, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s %s: %w: %s", bin, flag, dir, err, bytes.TrimSpace(out))
	}
	return nil
}
