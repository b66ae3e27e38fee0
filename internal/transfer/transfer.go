// Package transfer copies files and directory trees between the host and
// neurons, and between neurons: what `nsys-cortex cp` does. The neuron's
// side is never trusted: its listings are checked (single-element names,
// no name twice, bounded depth and size), its modes are masked to
// permission bits, and what it describes is written on the host by
// descriptor (hostfs), never through a symlink it planted — in this copy
// or an earlier one into the same place.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/faultpoint"
	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Endpoint is a neuron's side of a copy: its channel's client, or the
// daemon's API acting on one.
type Endpoint interface {
	WriteFileFrom(ctx context.Context, p string, r io.Reader, o *link.WriteOptions) (int64, error)
	ReadFileTo(ctx context.Context, p string, w io.Writer) (int64, error)
	Stat(ctx context.Context, p string) (*protocol.FileInfo, error)
	Lstat(ctx context.Context, p string) (*protocol.FileInfo, error)
	List(ctx context.Context, p string) ([]protocol.FileInfo, error)
	Mkdir(ctx context.Context, p string) (string, error)
	Symlink(ctx context.Context, target, p string) error
	Remove(ctx context.Context, p string, recursive bool) error
}

var _ Endpoint = (*link.Client)(nil)

// Location is one side of a copy: a host path (Neuron empty; "-" is
// stdin or stdout), or a path in a neuron reached through Client (relative
// to its workdir, or absolute as the neuron sees it).
type Location struct {
	Neuron string
	Path   string
	Client Endpoint
}

func (l Location) String() string {
	if l.Neuron == "" {
		return l.Path
	}
	return l.Neuron + ":" + l.Path
}

// Options are a copy's standard streams: "-" reads Stdin or writes
// Stdout, and skipped entries are reported on Stderr.
type Options struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Copy copies src to dst, as `nsys-cortex cp` does (see its help): a
// file or a tree, host to neuron, neuron to host or neuron to neuron;
// "-" on the host side is o.Stdin or o.Stdout.
func Copy(ctx context.Context, src, dst Location, o Options) error {
	if src.Path == "-" && src.Neuron == "" {
		if dst.Neuron == "" {
			return errors.New("cp: - needs a neuron on the other side")
		}
		if into, err := isDir(ctx, dst); err != nil {
			return err
		} else if into {
			return fmt.Errorf("cp: %s is a directory; name the file to write stdin to", dst)
		}
		if err := parentExists(ctx, dst); err != nil {
			return err
		}
		_, err := dst.Client.WriteFileFrom(ctx, dst.Path, o.Stdin, nil)
		return err
	}
	srcDir, srcMode, err := statSource(ctx, src)
	if err != nil {
		return err
	}
	if dst.Path == "-" && dst.Neuron == "" {
		if srcDir {
			return fmt.Errorf("cp: %s is a directory; - takes a single file", src)
		}
		_, err := src.Client.ReadFileTo(ctx, src.Path, o.Stdout)
		return err
	}
	// A copy out of a neuron never writes through a link at its
	// destination: the neuron chose what an earlier copy left there.
	if src.Neuron != "" {
		if err := refuseLink(ctx, dst); err != nil {
			return err
		}
	}
	// Copying into an existing directory puts the source inside it, under
	// its own name; otherwise the destination is the new name, and its
	// directory must exist (as with cp and docker cp).
	into, err := isDir(ctx, dst)
	if err != nil {
		return err
	}
	switch {
	case into:
		dst.Path = joinFor(dst, baseName(src))
		if src.Neuron != "" {
			if err := refuseLink(ctx, dst); err != nil {
				return err
			}
		}
	case strings.HasSuffix(dst.Path, "/"):
		return fmt.Errorf("cp: destination directory %s does not exist", dst)
	default:
		if err := parentExists(ctx, dst); err != nil {
			return err
		}
	}
	if srcDir {
		return copyTree(ctx, src, dst, o)
	}
	return copyFile(ctx, src, dst, srcMode)
}

// statSource checks the source is a file or a directory (following a
// symlink named on the command line, as cp does).
func statSource(ctx context.Context, src Location) (bool, fs.FileMode, error) {
	if src.Neuron == "" {
		st, err := os.Stat(src.Path)
		if err != nil {
			return false, 0, err
		}
		if !st.IsDir() && !st.Mode().IsRegular() {
			return false, 0, fmt.Errorf("cp: %s is not a regular file or a directory (to send a stream, use - and a pipe)", src)
		}
		return st.IsDir(), st.Mode().Perm(), nil
	}
	fi, err := src.Client.Stat(ctx, src.Path)
	if err != nil {
		return false, 0, err
	}
	if fi.Type != protocol.TypeDir && fi.Type != protocol.TypeFile {
		return false, 0, fmt.Errorf("cp: %s is not a regular file or a directory", src)
	}
	return fi.Type == protocol.TypeDir, fi.Perm(), nil
}

// refuseLink fails when l is a symlink. The operator's path up to it is
// resolved as written; a link at its end is what a neuron could have
// planted there by an earlier copy (results/out, made by the first `cp
// N:out results`, is where the second one writes).
func refuseLink(ctx context.Context, l Location) error {
	link := false
	if l.Neuron == "" {
		st, err := os.Lstat(l.Path)
		link = err == nil && st.Mode()&fs.ModeSymlink != 0
	} else {
		fi, err := l.Client.Lstat(ctx, l.Path)
		link = err == nil && fi.Type == protocol.TypeSymlink
	}
	if link {
		return fmt.Errorf("cp: %s is a symlink: a copy out of a neuron never writes through one (name the directory it points to, or remove it)", l)
	}
	return nil
}

func isDir(ctx context.Context, l Location) (bool, error) {
	if l.Neuron == "" {
		st, err := os.Stat(l.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil && st.IsDir(), err
	}
	fi, err := l.Client.Stat(ctx, l.Path)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Type == protocol.TypeDir, nil
}

// parentExists checks that the directory a new file goes into exists.
func parentExists(ctx context.Context, l Location) error {
	parent := Location{Neuron: l.Neuron, Client: l.Client, Path: filepath.Dir(l.Path)}
	if l.Neuron != "" {
		parent.Path = path.Dir(l.Path)
	}
	ok, err := isDir(ctx, parent)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("cp: destination directory %s does not exist", parent)
	}
	return nil
}

func baseName(l Location) string {
	if l.Neuron == "" {
		return filepath.Base(l.Path)
	}
	return path.Base(l.Path)
}

func joinFor(l Location, elem ...string) string {
	if l.Neuron == "" {
		return filepath.Join(append([]string{l.Path}, elem...)...)
	}
	return path.Join(append([]string{l.Path}, elem...)...)
}

// copyFile copies one file between any two locations, streaming.
func copyFile(ctx context.Context, src, dst Location, mode fs.FileMode) error {
	switch {
	case src.Neuron == "":
		f, err := os.Open(src.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = dst.Client.WriteFileFrom(ctx, dst.Path, f, &link.WriteOptions{Mode: mode})
		return err
	case dst.Neuron == "":
		dir, err := hostfs.Open(filepath.Dir(dst.Path))
		if err != nil {
			return err
		}
		defer dir.Close()
		return receiveFile(ctx, src, dir, filepath.Base(dst.Path), mode)
	}
	// Neuron to neuron: the source neuron's earlier copies may have left a
	// link where this file goes; it is replaced, never written through
	// (the destination neuron's agent would follow it anywhere in that
	// neuron).
	if fi, err := dst.Client.Lstat(ctx, dst.Path); err == nil && fi.Type == protocol.TypeSymlink {
		if err := dst.Client.Remove(ctx, dst.Path, false); err != nil {
			return err
		}
	}
	// Stream through a pipe.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := src.Client.ReadFileTo(ctx, src.Path, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	_, werr := dst.Client.WriteFileFrom(ctx, dst.Path, pr, &link.WriteOptions{Mode: mode})
	pr.CloseWithError(werr) // unblocks the reader if the writer gave up
	if rerr := <-done; rerr != nil && werr == nil {
		return rerr
	}
	return werr
}

// entry is one item of a tree being copied.
type entry struct {
	rel    string
	kind   string // protocol.TypeFile, TypeDir or TypeSymlink
	mode   fs.FileMode
	target string // of a symlink
}

// receiveFile copies the neuron file src into a new file name in the host
// directory dir: written to a temporary file made there (O_EXCL: nothing
// planted at its name is opened), given mode's permission bits only, and
// renamed over name (which replaces a symlink there, never follows it).
func receiveFile(ctx context.Context, src Location, dir *hostfs.Dir, name string, mode fs.FileMode) error {
	tmp, tmpName, err := dir.CreateTemp("."+name+".cortex-", 0o600)
	if err != nil {
		return err
	}
	_, err = src.Client.ReadFileTo(ctx, src.Path, link.Fresh{File: tmp})
	if err == nil {
		err = tmp.Chmod(mode.Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	faultpoint.Hit("cp.received")
	if err == nil {
		err = dir.Rename(tmpName, name)
	}
	if err != nil {
		dir.Remove(tmpName)
	}
	return err
}

// copyTree copies a directory tree: files, directories and symlinks (kept
// as links, never followed). Anything else is reported and makes cp fail.
func copyTree(ctx context.Context, src, dst Location, o Options) error {
	entries, skipped, err := walk(ctx, src, o)
	if err != nil {
		return err
	}
	if dst.Neuron == "" {
		err = receiveTree(ctx, src, dst.Path, entries)
	} else {
		err = sendTree(ctx, src, dst, entries)
	}
	if err != nil {
		return err
	}
	if skipped > 0 {
		return fmt.Errorf("cp: skipped %d entries that are neither files, directories nor symlinks", skipped)
	}
	return nil
}

// receiveTree writes the tree of a neuron's entries under the host
// directory dst. The entries' names and shape are the neuron's: every
// directory below dst is made and entered by descriptor (hostfs), one name
// at a time, so a symlink the neuron planted — in this copy or an earlier
// one into the same place — is never followed; a name that exists as
// something else than what the entry says fails the copy. dst's directory
// is the operator's path and is resolved as written; dst itself is made
// or entered in it by descriptor too (an earlier copy may have left a
// link of the neuron's there).
func receiveTree(ctx context.Context, src Location, dst string, entries []entry) error {
	parent, err := hostfs.Open(filepath.Dir(dst))
	if err != nil {
		return err
	}
	root, _, err := parent.MakeDir(filepath.Base(dst), entries[0].mode|0o700)
	parent.Close()
	if err != nil {
		return err
	}
	// The open directories along the current entry's path: entries come
	// parents first, each directory's subtree after it (walk's order).
	type open struct {
		rel string
		dir *hostfs.Dir
	}
	stack := []open{{".", root}}
	defer func() {
		for _, o := range stack {
			o.dir.Close()
		}
	}()
	for _, e := range entries[1:] {
		parent, name := path.Split(e.rel)
		parent = path.Clean(parent)
		for len(stack) > 1 && stack[len(stack)-1].rel != parent {
			stack[len(stack)-1].dir.Close()
			stack = stack[:len(stack)-1]
		}
		if stack[len(stack)-1].rel != parent {
			return fmt.Errorf("cp: %s comes before its directory (an internal error)", e.rel)
		}
		dir := stack[len(stack)-1].dir
		var err error
		switch e.kind {
		case protocol.TypeFile:
			s := src
			s.Path = joinFor(src, e.rel)
			err = receiveFile(ctx, s, dir, name, e.mode)
		case protocol.TypeDir:
			var sub *hostfs.Dir
			if sub, _, err = dir.MakeDir(name, e.mode|0o700); err == nil {
				stack = append(stack, open{e.rel, sub})
			}
		case protocol.TypeSymlink:
			if st, lerr := dir.Lstat(name); lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				dir.Remove(name) // replace an old link, as cp -a does
			}
			err = dir.Symlink(e.target, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sendTree copies entries into a neuron. Between two neurons the entries
// are the source neuron's, so a directory the copy enters must be a
// directory in the destination, not a symlink there (which an earlier
// copy from the same source could have made): each is checked before
// anything is written into it.
func sendTree(ctx context.Context, src, dst Location, entries []entry) error {
	for _, e := range entries {
		s, d := src, dst
		s.Path, d.Path = joinFor(src, e.rel), joinFor(dst, e.rel)
		var err error
		switch e.kind {
		case protocol.TypeFile:
			err = copyFile(ctx, s, d, e.mode)
		case protocol.TypeDir:
			err = makeDir(ctx, d)
		case protocol.TypeSymlink:
			err = makeSymlink(ctx, d, e.target)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Bounds on a tree a neuron lists: its shape is the neuron's to choose.
const (
	maxTreeEntries = 1 << 20
	maxTreeDepth   = 512
)

// walk lists a tree, the root first, parents before children.
func walk(ctx context.Context, src Location, o Options) ([]entry, int, error) {
	var entries []entry
	skipped := 0
	if src.Neuron == "" {
		err := filepath.WalkDir(src.Path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src.Path, p)
			e := entry{rel: filepath.ToSlash(rel)}
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				e.kind = protocol.TypeSymlink
				if e.target, err = os.Readlink(p); err != nil {
					return err
				}
			case d.IsDir():
				e.kind = protocol.TypeDir
			case d.Type().IsRegular():
				e.kind = protocol.TypeFile
			default:
				fmt.Fprintf(o.Stderr, "cp: skipping %s (not a file, directory or symlink)\n", protocol.CleanLogText(p))
				skipped++
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			e.mode = info.Mode().Perm()
			entries = append(entries, e)
			return nil
		})
		return entries, skipped, err
	}
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > maxTreeDepth {
			return fmt.Errorf("cp: %s:%s nests deeper than %d directories", src.Neuron, path.Join(src.Path, rel), maxTreeDepth)
		}
		list, err := src.Client.List(ctx, path.Join(src.Path, rel))
		if err != nil {
			return err
		}
		// The listing is the neuron's: check it here too (a daemon's
		// client has not), so that no name leads outside the tree.
		seen := make(map[string]bool, len(list))
		for _, fi := range list {
			if err := fi.CheckEntry(); err != nil {
				return fmt.Errorf("cp: %s:%s: refusing the listing: %v", src.Neuron, path.Join(src.Path, rel), err)
			}
			if seen[fi.Name] {
				return fmt.Errorf("cp: %s:%s: %q is listed twice (it changed while it was read); try again", src.Neuron, path.Join(src.Path, rel), fi.Name)
			}
			seen[fi.Name] = true
			if len(entries) >= maxTreeEntries {
				return fmt.Errorf("cp: %s:%s holds more than %d entries", src.Neuron, src.Path, maxTreeEntries)
			}
			e := entry{rel: path.Join(rel, fi.Name), kind: fi.Type, mode: fi.Perm(), target: fi.Target}
			switch fi.Type {
			case protocol.TypeDir:
				entries = append(entries, e)
				if err := walk(e.rel, depth+1); err != nil {
					return err
				}
			case protocol.TypeFile, protocol.TypeSymlink:
				entries = append(entries, e)
			default:
				// The name is the neuron's: shown escaped, never as terminal
				// control sequences.
				fmt.Fprintf(o.Stderr, "cp: skipping %s:%s (%s)\n", src.Neuron, protocol.CleanLogText(path.Join(src.Path, e.rel)), protocol.CleanLogText(fi.Type))
				skipped++
			}
		}
		return nil
	}
	entries = append(entries, entry{rel: ".", kind: protocol.TypeDir, mode: 0o755})
	return entries, skipped, walk(".", 0)
}

// makeDir makes directory d in a neuron, or checks that it is one there
// already — a directory, not a symlink to one.
func makeDir(ctx context.Context, d Location) error {
	fi, err := d.Client.Lstat(ctx, d.Path)
	switch {
	case errdefs.IsNotFound(err):
		_, err = d.Client.Mkdir(ctx, d.Path)
		return err
	case err != nil:
		return err
	case fi.Type != protocol.TypeDir:
		return fmt.Errorf("cp: %s exists and is a %s, not a directory: a copy never writes through it", d, fi.Type)
	}
	return nil
}

// makeSymlink creates (or replaces) the symlink d in a neuron.
func makeSymlink(ctx context.Context, d Location, target string) error {
	if fi, err := d.Client.Lstat(ctx, d.Path); err == nil && fi.Type == protocol.TypeSymlink {
		if err := d.Client.Remove(ctx, d.Path, false); err != nil {
			return err
		}
	}
	return d.Client.Symlink(ctx, target, d.Path)
}
