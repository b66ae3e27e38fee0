// Package fullbin finds the full nsys-cortex program for the light one
// (internal/cli/split.go says why there are two). `make build` embeds the
// full program, gzip-compressed, in the light one; the first command that
// needs it unpacks it into the home's bin directory, named for its
// content, and every later one runs that file.
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
	"syscall"

	"golang.org/x/sys/unix"
)

// EnvFullBin names a full program to run instead of the embedded one.
const EnvFullBin = "NSYS_CORTEX_FULL_BIN"

// Beside is the full program's name beside the light one, when a build
// keeps them apart.
const Beside = "nsys-cortex-full"

var (
	embedded []byte // set by embed.go in the cortex_embed_full build
	// sum names the embedded program's content (hex of its SHA-256),
	// set at link time by scripts/build.sh.
	sum string
)

// Embedded reports whether this executable carries the full program.
func Embedded() bool { return len(embedded) > 0 }

// Path returns the full program to run: NSYS_CORTEX_FULL_BIN, the
// embedded one (unpacked into binDir once), or nsys-cortex-full beside
// this executable.
func Path(binDir string) (string, error) {
	if p := os.Getenv(EnvFullBin); p != "" {
		return p, check(p, -1)
	}
	if len(embedded) > 0 {
		return unpack(binDir)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(exe), Beside)
	if err := check(p, -1); err != nil {
		return "", fmt.Errorf("this nsys-cortex is the light program and carries no full one, and %w; "+
			"build with `make build`, or set %s", err, EnvFullBin)
	}
	return p, nil
}

// unpack writes the embedded program to binDir/nsys-cortex-full-<sum>
// unless it is there already, and returns its path.
func unpack(binDir string) (string, error) {
	if len(sum) < 16 || len(embedded) < 4 {
		return "", errors.New("the embedded full program has no content sum: build with scripts/build.sh")
	}
	// gzip's trailer holds the size of what it compressed, mod 2^32.
	size := int64(binary.LittleEndian.Uint32(embedded[len(embedded)-4:]))
	p := filepath.Join(binDir, Beside+"-"+sum[:16])
	if check(p, size) == nil {
		return p, nil
	}
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		return "", err
	}
	zr, err := gzip.NewReader(bytes.NewReader(embedded))
	if err != nil {
		return "", fmt.Errorf("the embedded full program: %w", err)
	}
	tmp, err := os.CreateTemp(binDir, "."+Beside+"-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; a partial one otherwise
	_, err = io.Copy(tmp, zr)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("unpacking the full program into %s: %w", binDir, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", err
	}
	// The full programs of earlier builds go: one is ~100 MB. A process
	// running one keeps its file until it exits.
	old, _ := filepath.Glob(filepath.Join(binDir, Beside+"-*"))
	for _, o := range old {
		if o != p {
			os.Remove(o)
		}
	}
	return p, check(p, size)
}

// check says whether p is a program this user may run as its own: a
// regular executable file, owned by this user or root, that no one else
// can write, of size bytes when size is not -1.
func check(p string, size int64) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("the full program %s: %w", p, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("the full program %s is not a regular file", p)
	case st != nil && st.Uid != uint32(os.Geteuid()) && st.Uid != 0:
		return fmt.Errorf("the full program %s belongs to uid %d, not to this user", p, st.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the full program %s can be written by others (mode %v)", p, fi.Mode().Perm())
	case size >= 0 && fi.Size()&0xffffffff != size:
		return fmt.Errorf("the full program %s is %d bytes, not %d", p, fi.Size(), size)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("the full program %s is not executable", p)
	}
	return nil
}
