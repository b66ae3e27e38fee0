// Package fullbin finds the full nsys-cortex program for the light one
// (internal/cli/split.go says why there are two). `make build` embeds the
// full program, gzip-compressed, in the light one; the first command that
// needs it unpacks it into the home's bin directory, named for its
// content, and every later one runs that file.
//
// The program is handed over open (O_PATH), checked on that descriptor,
// and run through /proc/self/fd: what runs is the file that was checked,
// whatever happens to its name meanwhile. The bin directory and every one
// above it must be this user's or root's and not writable by others
// (hostfs.TrustedDir).
package fullbin

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/hostfs"
)

// EnvFullBin names a full program to run instead of the embedded one.
const EnvFullBin = "NSYS_CORTEX_FULL_BIN"

// Beside is the full program's name beside the light one, when a build
// keeps them apart.
const Beside = "nsys-cortex-full"

// keep is how long an unpacked program of another build is left alone
// after it was last unpacked: that build may be about to run it.
const keep = 10 * time.Minute

var (
	embedded []byte // set by embed.go in the cortex_embed_full build
	// sum names the embedded program's content (hex of its SHA-256),
	// set at link time by scripts/build.sh.
	sum string
)

// Embedded reports whether this executable carries the full program.
func Embedded() bool { return len(embedded) > 0 }

// Open returns the full program to run, open with O_PATH and checked:
// NSYS_CORTEX_FULL_BIN, the embedded one (unpacked into binDir once), or
// nsys-cortex-full beside this executable. Run it with ExecPath.
func Open(binDir string) (*os.File, error) {
	if p := os.Getenv(EnvFullBin); p != "" {
		return open(p, -1)
	}
	if len(embedded) > 0 {
		return unpack(binDir)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f, err := open(filepath.Join(filepath.Dir(exe), Beside), -1)
	if err != nil {
		return nil, fmt.Errorf("this nsys-cortex is the light program and carries no full one, and %w; "+
			"build with `make build`, or set %s", err, EnvFullBin)
	}
	return f, nil
}

// ExecPath is the path that runs f, the file itself.
func ExecPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// unpack opens binDir/nsys-cortex-full-<sum>, writing it first unless it
// is there already.
func unpack(binDir string) (*os.File, error) {
	if len(sum) < 16 || len(embedded) < 4 {
		return nil, errors.New("the embedded full program has no content sum: build with scripts/build.sh")
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil { // as the agent's unpack makes it
		return nil, err
	}
	if err := hostfs.TrustedDir(binDir); err != nil {
		return nil, fmt.Errorf("the full program's directory: %w", err)
	}
	// gzip's trailer holds the size of what it compressed, mod 2^32.
	size := int64(binary.LittleEndian.Uint32(embedded[len(embedded)-4:]))
	name := Beside + "-" + sum[:16]
	p := filepath.Join(binDir, name)
	if f, err := open(p, size); err == nil {
		return f, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(embedded))
	if err != nil {
		return nil, fmt.Errorf("the embedded full program: %w", err)
	}
	tmp, err := os.CreateTemp(binDir, "."+name+"-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; a partial one otherwise
	_, err = io.Copy(tmp, zr)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync() // a crash leaves no file of the right size with the wrong content
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("unpacking the full program into %s: %w", binDir, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return nil, err
	}
	removeOld(binDir, name)
	return open(p, size)
}

// removeOld removes what earlier builds unpacked (one is ~100 MB), and
// what unpacks that died left, but not a program some process runs or
// that was unpacked in the last ten minutes.
func removeOld(binDir, current string) {
	var old []string
	for _, pattern := range []string{Beside + "-*", "." + Beside + "-*"} {
		m, _ := filepath.Glob(filepath.Join(binDir, pattern))
		old = append(old, m...)
	}
	running := runningPrograms()
	for _, o := range old {
		fi, err := os.Lstat(o)
		if err != nil || filepath.Base(o) == current || running[o] || time.Since(fi.ModTime()) < keep {
			continue
		}
		os.Remove(o)
	}
}

// runningPrograms returns the executables of the processes this user can
// see.
func runningPrograms() map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil {
			out[strings.TrimSuffix(exe, " (deleted)")] = true
		}
	}
	return out
}

// open opens p with O_PATH, not following a link at its name, and checks
// on the descriptor that it is a program this user may run as its own: a
// regular file, owned by this user or root, that no one else can write,
// executable by its owner, of size bytes when size is not -1.
func open(p string, size int64) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the full program %s: %w", p, &os.PathError{Op: "open", Path: p, Err: err})
	}
	f := os.NewFile(uintptr(fd), p)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if err := checkStat(p, &st, size); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkStat(p string, st *unix.Stat_t, size int64) error {
	if err := hostfs.TrustedFile(st); err != nil {
		return fmt.Errorf("the full program %s: %w", p, err)
	}
	switch {
	case st.Mode&0o100 == 0:
		return fmt.Errorf("the full program %s is not executable", p)
	case size >= 0 && st.Size&0xffffffff != size:
		return fmt.Errorf("the full program %s is %d bytes, not %d", p, st.Size, size)
	}
	return nil
}
