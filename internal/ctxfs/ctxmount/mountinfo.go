package ctxmount

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// FSType is the filesystem type a CortexFS mount has in
// /proc/self/mountinfo ("fuse." + the name), and FSSource its source.
const (
	FSType   = "fuse.cortexfs"
	FSSource = "cortexfs"
)

// MagicName is the file at the root that identifies a CortexFS mount.
const MagicName = ".cortexfs"

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
