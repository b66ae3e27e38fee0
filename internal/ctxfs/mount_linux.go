package ctxfs

import (
	"golang.org/x/sys/unix"

	"bufio"
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
)

// FSType is the filesystem type a CortexFS mount has in
// /proc/self/mountinfo ("fuse." + the name), and FSSource its source.
const (
	FSType   = "fuse.cortexfs"
	FSSource = "cortexfs"
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
	if m, ok := MountAt(dir); ok {
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
			FsName:        FSSource,
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
	if m, ok := MountAt(dir); ok { // the mount table, not the mount itself
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
	m, ok := MountAt(dir)
	if !ok {
		return fmt.Errorf("umount: nothing is mounted at %s", dir)
	}
	if m.FSType != FSType {
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
	if m, ok := MountAt(dir); ok && m.FSType != FSType {
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

// MountInfo is one line of /proc/self/mountinfo.
type MountInfo struct {
	Dev     string // major:minor of the filesystem (a FUSE connection's minor names it in /sys/fs/fuse/connections)
	Point   string
	FSType  string
	Source  string
	Options string // the per-mount options (rw or ro first)
}

// MountAt returns the topmost mount at dir.
func MountAt(dir string) (MountInfo, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return MountInfo{}, false
	}
	defer f.Close()
	var found MountInfo
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, good := parseMountInfo(sc.Text())
		if good && m.Point == dir {
			found, ok = m, true // later lines are mounted on top
		}
	}
	return found, ok
}

// parseMountInfo reads "id parent maj:min root point opts [tags] - type source superopts".
func parseMountInfo(line string) (MountInfo, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return MountInfo{}, false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 6 || len(b) < 2 {
		return MountInfo{}, false
	}
	return MountInfo{Dev: a[2], Point: unescapeMount(a[4]), Options: a[5], FSType: b[0], Source: b[1]}, true
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Validate confirms that dir is this CortexFS, mounted read-write (seed
// 003 §6): the mount table names a cortexfs FUSE mount at dir, and its
// magic file carries token. readMagic reads the magic file; it must run
// outside the serving process (a child process such as cat), because the
// server never touches its own mount.
func Validate(dir, token string, readMagic func(path string) ([]byte, error)) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	m, ok := MountAt(dir)
	if !ok {
		return fmt.Errorf("validate: nothing is mounted at %s", dir)
	}
	if m.FSType != FSType || m.Source != FSSource {
		return fmt.Errorf("validate: %s is %s from %s, not CortexFS", dir, m.FSType, m.Source)
	}
	if !strings.HasPrefix(m.Options, "rw") {
		return fmt.Errorf("validate: %s is mounted %s, not read-write", dir, m.Options)
	}
	b, err := readMagic(filepath.Join(dir, MagicName))
	if err != nil {
		return fmt.Errorf("validate: reading %s: %w", MagicName, err)
	}
	if want := "cortexfs 1 " + token + "\n"; string(b) != want {
		return fmt.Errorf("validate: %s at %s is another CortexFS than this one", MagicName, dir)
	}
	return nil
}

// ReadWithCat reads a file through a child process (cat), for Validate.
func ReadWithCat(path string) ([]byte, error) {
	out, err := exec.Command("cat", path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
	}
	return out, err
}
