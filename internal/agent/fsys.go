//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// fsys confines file operations to a root directory. Paths come from the host
// as the neuron sees them: absolute, or relative to the workdir. With a root
// other than "/", every operation goes through os.Root, which resolves each
// component beneath the root (openat2 RESOLVE_BENEATH on Linux) so a symlink
// or ".." can never lead out, not even by a race.
type fsys struct {
	root    string   // absolute, symlinks resolved; "/" = unconfined
	workdir string   // absolute, inside root
	r       *os.Root // nil when unconfined
}

func newFsys(root, workdir string) (*fsys, error) {
	if root == "" {
		root = "/"
	}
	root, err := realDir(root)
	if err != nil {
		return nil, fmt.Errorf("agent root: %w", err)
	}
	if workdir == "" {
		workdir = root
	}
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return nil, fmt.Errorf("agent workdir: %w", err)
	}
	if workdir, err = realDir(workdir); err != nil {
		return nil, fmt.Errorf("agent workdir: %w", err)
	}
	f := &fsys{root: root, workdir: workdir}
	if !within(root, workdir) {
		return nil, fmt.Errorf("agent workdir %s is outside the root %s", workdir, root)
	}
	if root != "/" {
		if f.r, err = os.OpenRoot(root); err != nil {
			return nil, fmt.Errorf("agent root: %w", err)
		}
	}
	return f, nil
}

func realDir(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", real)
	}
	return real, nil
}

// within reports whether path p lies in or under dir (both clean and absolute).
func within(dir, p string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// abs returns the absolute neuron path of p, cleaned lexically. It is what
// results report, and a first check: a path that leaves the root even
// lexically is refused here.
func (f *fsys) abs(p string) (string, error) {
	if p == "" {
		return "", protocol.Errorf(protocol.CodeBadRequest, "path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", protocol.Errorf(protocol.CodeBadRequest, "path %q contains a NUL byte", p)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(f.workdir, p)
	}
	p = filepath.Clean(p)
	if !within(f.root, p) {
		return "", protocol.Errorf(protocol.CodePathEscape, "path %s is outside the neuron's root %s", p, f.root)
	}
	return p, nil
}

// name maps p to the name the underlying call takes: relative to the root
// when confined, absolute otherwise. ".." is not cleaned away lexically:
// the kernel (os.Root beneath the root) resolves it after the symlinks
// before it, as a shell inside the neuron would. It also returns abs(p).
func (f *fsys) name(p string) (name, abs string, err error) {
	if abs, err = f.abs(p); err != nil {
		return "", "", err
	}
	full := p
	if !filepath.IsAbs(full) {
		full = f.workdir + "/" + full
	}
	if f.r == nil {
		return full, abs, nil
	}
	rel, ok := strings.CutPrefix(full, f.root)
	if !ok || (rel != "" && rel[0] != '/') {
		return "", "", protocol.Errorf(protocol.CodePathEscape, "path %s is outside the neuron's root %s", p, f.root)
	}
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return ".", abs, nil
	}
	return strings.Join(parts, "/"), abs, nil
}

func (f *fsys) openFile(p string, flag int, perm fs.FileMode) (*os.File, string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return nil, "", err
	}
	var file *os.File
	if f.r != nil {
		file, err = f.r.OpenFile(name, flag, perm)
	} else {
		file, err = os.OpenFile(name, flag, perm)
	}
	if err != nil {
		return nil, abs, pathError("open", abs, err)
	}
	return file, abs, nil
}

func (f *fsys) stat(p string, follow bool) (fs.FileInfo, string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return nil, "", err
	}
	var st fs.FileInfo
	switch {
	case f.r != nil && follow:
		st, err = f.r.Stat(name)
	case f.r != nil:
		st, err = f.r.Lstat(name)
	case follow:
		st, err = os.Stat(name)
	default:
		st, err = os.Lstat(name)
	}
	if err != nil {
		return nil, abs, pathError("stat", abs, err)
	}
	return st, abs, nil
}

func (f *fsys) symlink(target, p string) (string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return "", err
	}
	if f.r != nil {
		err = f.r.Symlink(target, name)
	} else {
		err = os.Symlink(target, name)
	}
	if err != nil {
		return abs, pathError("symlink", abs, err)
	}
	return abs, nil
}

func (f *fsys) readlink(p string) (string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return "", err
	}
	var t string
	if f.r != nil {
		t, err = f.r.Readlink(name)
	} else {
		t, err = os.Readlink(name)
	}
	if err != nil {
		return "", pathError("readlink", abs, err)
	}
	return t, nil
}

func (f *fsys) mkdir(p string, parents bool, perm fs.FileMode) (string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return "", err
	}
	switch {
	case f.r != nil && parents:
		err = f.r.MkdirAll(name, perm)
	case f.r != nil:
		err = f.r.Mkdir(name, perm)
	case parents:
		err = os.MkdirAll(name, perm)
	default:
		err = os.Mkdir(name, perm)
	}
	if err != nil {
		return abs, pathError("mkdir", abs, err)
	}
	return abs, nil
}

func (f *fsys) remove(p string, recursive bool) (string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return "", err
	}
	if entry, err := f.resolveEntry(p); err != nil {
		return abs, err
	} else if f.protected(entry) {
		return abs, protocol.Errorf(protocol.CodeBadRequest, "refusing to remove %s: it is the neuron's root or workdir (or one of its parents)", entry)
	}
	if _, _, err := f.stat(p, false); err != nil {
		return abs, err
	}
	switch {
	case f.r != nil && recursive:
		err = f.r.RemoveAll(name)
	case f.r != nil:
		err = f.r.Remove(name)
	case recursive:
		err = os.RemoveAll(name)
	default:
		err = os.Remove(name)
	}
	if err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return abs, protocol.Errorf(protocol.CodeBadRequest, "remove %s: directory not empty (set recursive to remove it and its contents)", abs)
		}
		return abs, pathError("remove", abs, err)
	}
	return abs, nil
}

func (f *fsys) rename(from, to string) error {
	fname, fabs, err := f.name(from)
	if err != nil {
		return err
	}
	tname, tabs, err := f.name(to)
	if err != nil {
		return err
	}
	if entry, err := f.resolveEntry(from); err != nil {
		return err
	} else if f.protected(entry) {
		return protocol.Errorf(protocol.CodeBadRequest, "refusing to move %s: it is the neuron's root or workdir (or one of its parents)", entry)
	}
	if f.r != nil {
		err = f.r.Rename(fname, tname)
	} else {
		err = os.Rename(fname, tname)
	}
	if err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return protocol.Errorf(protocol.CodeBadRequest, "move %s to %s: they are on different filesystems", fabs, tabs)
		}
		return pathError("move", fabs+" -> "+tabs, err)
	}
	return nil
}

// renameNoReplace renames from to to unless to exists, atomically
// (renameat2 RENAME_NOREPLACE), on directory descriptors opened beneath the
// root so neither name can be redirected out of it.
func (f *fsys) renameNoReplace(from, to string) error {
	fdir, fbase, err := f.openParent(from)
	if err != nil {
		return err
	}
	defer fdir.Close()
	tdir, tbase, err := f.openParent(to)
	if err != nil {
		return err
	}
	defer tdir.Close()
	err = unix.Renameat2(int(fdir.Fd()), fbase, int(tdir.Fd()), tbase, unix.RENAME_NOREPLACE)
	switch {
	case errors.Is(err, unix.EEXIST):
		return protocol.Errorf(protocol.CodeBadRequest, "move %s to %s: the target already exists", from, to)
	case errors.Is(err, unix.EXDEV):
		return protocol.Errorf(protocol.CodeBadRequest, "move %s to %s: they are on different filesystems", from, to)
	case err != nil:
		return pathError("move", from+" -> "+to, err)
	}
	return nil
}

// openParent opens the directory holding p (beneath the root) and returns
// it with p's last component.
func (f *fsys) openParent(p string) (*os.File, string, error) {
	base := filepath.Base(p)
	if base == "." || base == ".." || base == "/" {
		return nil, "", protocol.Errorf(protocol.CodeBadRequest, "path %s does not name a directory entry", p)
	}
	d, _, err := f.openFile(parentOf(p), os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, "", err
	}
	return d, base, nil
}

// resolve returns the absolute neuron path p names, with every symlink in
// its existing part resolved as the kernel resolves it: components in
// order, ".." applying to where the walk has got to (after the symlinks
// before it). Anything that leaves the root is refused; so is an absolute
// symlink when confined (os.Root does not follow those either). exists
// reports whether the whole path exists.
func (f *fsys) resolve(p string) (string, bool, error) {
	if _, err := f.abs(p); err != nil {
		return "", false, err
	}
	full := p
	if !filepath.IsAbs(full) {
		full = f.workdir + "/" + full
	}
	rel := full
	if f.root != "/" {
		var ok bool
		if rel, ok = strings.CutPrefix(full, f.root); !ok || (rel != "" && rel[0] != '/') {
			return "", false, f.escape(p)
		}
	}
	comps := splitPath(rel)
	cur := f.root
	for hops := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		if c == ".." {
			if cur == f.root {
				if f.root == "/" {
					continue // "/.." is "/"
				}
				return "", false, f.escape(p)
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		st, _, err := f.stat(next, false)
		if protocol.HasCode(err, protocol.CodeNotFound) {
			// The rest does not exist, so it holds no symlinks: it is lexical.
			out := filepath.Clean(filepath.Join(append([]string{next}, comps...)...))
			if !within(f.root, out) {
				return "", false, f.escape(p)
			}
			return out, false, nil
		}
		if err != nil {
			return "", false, err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", false, protocol.Errorf(protocol.CodeBadRequest, "path %s: too many levels of symbolic links", p)
		}
		target, err := f.readlink(next)
		if err != nil {
			return "", false, err
		}
		if filepath.IsAbs(target) {
			if f.r != nil {
				return "", false, protocol.Errorf(protocol.CodePathEscape,
					"path %s goes through the absolute symlink %s -> %s, which the neuron's file API does not follow", p, next, target)
			}
			cur = "/"
		}
		comps = append(splitPath(target), comps...)
	}
	return cur, true, nil
}

// resolveEntry resolves p up to its last component, which is not followed:
// the path of the directory entry itself (a symlink names the link).
func (f *fsys) resolveEntry(p string) (string, error) {
	base := filepath.Base(p)
	if base == "." || base == ".." || base == "/" || strings.HasSuffix(p, "/") {
		out, _, err := f.resolve(p)
		return out, err
	}
	dir, _, err := f.resolve(parentOf(p))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, base), nil
}

func (f *fsys) escape(p string) error {
	return protocol.Errorf(protocol.CodePathEscape, "path %s leads outside the neuron's root %s", p, f.root)
}

// splitPath splits a slash path into its components, dropping empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// protected reports whether removing or moving the resolved path p would
// take the root or the workdir with it.
func (f *fsys) protected(p string) bool { return p == "/" || within(p, f.root) || within(p, f.workdir) }

// errEscape is the message os.Root gives when a path would leave the root.
const errEscapeMessage = "path escapes from parent"

func isEscape(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return err != nil && err.Error() == errEscapeMessage
}

// pathError maps a filesystem error on path p onto the closed set of codes,
// with a message that names the neuron path rather than host internals.
func pathError(op, p string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	code, reason := classify(err)
	return &protocol.Error{Code: code, Message: fmt.Sprintf("%s %s: %s", op, p, reason)}
}

// fsError maps an error with no path at hand.
func fsError(err error) *protocol.Error {
	code, reason := classify(err)
	return &protocol.Error{Code: code, Message: reason}
}

func classify(err error) (protocol.Code, string) {
	if isEscape(err) {
		return protocol.CodePathEscape, "it leads outside the neuron's root (through '..' or a symlink)"
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return protocol.CodeNotFound, "no such file or directory"
		case errors.Is(err, fs.ErrPermission):
			return protocol.CodePermission, "permission denied"
		}
		return protocol.CodeInternal, err.Error()
	}
	switch errno {
	case syscall.ENOENT:
		return protocol.CodeNotFound, "no such file or directory"
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return protocol.CodePermission, errno.Error()
	case syscall.ENOTDIR:
		return protocol.CodeBadRequest, "a component of the path is not a directory"
	case syscall.EISDIR:
		return protocol.CodeBadRequest, "is a directory"
	case syscall.EEXIST:
		return protocol.CodeBadRequest, "already exists"
	case syscall.ENOTEMPTY:
		return protocol.CodeBadRequest, "directory not empty"
	case syscall.ELOOP:
		return protocol.CodeBadRequest, "too many levels of symbolic links"
	case syscall.ENAMETOOLONG, syscall.EINVAL:
		return protocol.CodeBadRequest, errno.Error()
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
		return protocol.CodeTooLarge, errno.Error()
	}
	return protocol.CodeInternal, errno.Error()
}
