package cli

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

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// location is one side of a copy: a local path, stdin/stdout ("-"), or a
// path in a neuron.
type location struct {
	neuron string // empty for local
	path   string
	client channel
}

func (l location) String() string {
	if l.neuron == "" {
		return l.path
	}
	return l.neuron + ":" + l.path
}

// parseLocation reads ID:path as a neuron path; anything else (or a path
// starting with / or .) is local.
func parseLocation(s string) location {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return location{path: s}
	}
	if id, p, ok := strings.Cut(s, ":"); ok && ids.Validate(id) == nil {
		if p == "" {
			p = "."
		}
		return location{neuron: id, path: p}
	}
	return location{path: s}
}

func (a *App) cpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between the host and neurons",
		Long: `cp copies a file or a directory tree (files, directories and symlinks;
contents and permission bits, not owners or times). A neuron path is written
ID:path: a relative path is taken from the neuron's workdir, an absolute one
is the path as the neuron sees it (in process mode it must lie inside the
workdir). Copying into an existing directory puts the source inside it;
otherwise the destination's directory must exist. "-" is stdin (as SRC) or
stdout (as DST), for a single file. An interrupted copy leaves the
destination as it was.

The destination you name is resolved as you wrote it; everything the copy
makes below it is made without following any symlink, so a link a neuron
planted (in this copy or an earlier one into the same place) fails the copy
instead of being written through. Files never carry set-id bits out of a
neuron.

  nsys-cortex cp ./report.csv demo:            # into the neuron's workdir
  nsys-cortex cp demo:out/result.json .        # out of it
  nsys-cortex cp ./src demo:src                # a tree
  nsys-cortex cp demo:src other:src            # between neurons
  tar c . | nsys-cortex cp - demo:code.tar     # a stream`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			if src.neuron == "" && dst.neuron == "" {
				return errors.New("cp: neither side names a neuron (write ID:path)")
			}
			clients := map[string]channel{}
			for _, l := range []*location{&src, &dst} {
				if l.neuron == "" {
					continue
				}
				if c, ok := clients[l.neuron]; ok {
					l.client = c
					continue
				}
				c, st, err := a.connect(ctx, l.neuron)
				if err != nil {
					return err
				}
				l.neuron = st.ID
				l.client, clients[l.neuron] = c, c
			}
			return interrupted(ctx, a.copy(ctx, src, dst))
		},
	}
}

func (a *App) copy(ctx context.Context, src, dst location) error {
	if src.path == "-" && src.neuron == "" {
		if dst.neuron == "" {
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
		_, err := dst.client.WriteFileFrom(ctx, dst.path, a.Stdin, nil)
		return err
	}
	srcDir, srcMode, err := a.statSource(ctx, src)
	if err != nil {
		return err
	}
	if dst.path == "-" && dst.neuron == "" {
		if srcDir {
			return fmt.Errorf("cp: %s is a directory; - takes a single file", src)
		}
		_, err := src.client.ReadFileTo(ctx, src.path, a.Stdout)
		return err
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
		dst.path = joinFor(dst, baseName(src))
	case strings.HasSuffix(dst.path, "/"):
		return fmt.Errorf("cp: destination directory %s does not exist", dst)
	default:
		if err := parentExists(ctx, dst); err != nil {
			return err
		}
	}
	if srcDir {
		return a.copyTree(ctx, src, dst)
	}
	return copyFile(ctx, src, dst, srcMode)
}

// statSource checks the source is a file or a directory (following a
// symlink named on the command line, as cp does).
func (a *App) statSource(ctx context.Context, src location) (bool, fs.FileMode, error) {
	if src.neuron == "" {
		st, err := os.Stat(src.path)
		if err != nil {
			return false, 0, err
		}
		if !st.IsDir() && !st.Mode().IsRegular() {
			return false, 0, fmt.Errorf("cp: %s is not a regular file or a directory (to send a stream, use - and a pipe)", src)
		}
		return st.IsDir(), st.Mode().Perm(), nil
	}
	fi, err := src.client.Stat(ctx, src.path)
	if err != nil {
		return false, 0, err
	}
	if fi.Type != protocol.TypeDir && fi.Type != protocol.TypeFile {
		return false, 0, fmt.Errorf("cp: %s is not a regular file or a directory", src)
	}
	return fi.Type == protocol.TypeDir, fi.Perm(), nil
}

func isDir(ctx context.Context, l location) (bool, error) {
	if l.neuron == "" {
		st, err := os.Stat(l.path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil && st.IsDir(), err
	}
	fi, err := l.client.Stat(ctx, l.path)
	if protocol.HasCode(err, protocol.CodeNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Type == protocol.TypeDir, nil
}

// parentExists checks that the directory a new file goes into exists.
func parentExists(ctx context.Context, l location) error {
	parent := location{neuron: l.neuron, client: l.client, path: filepath.Dir(l.path)}
	if l.neuron != "" {
		parent.path = path.Dir(l.path)
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

func baseName(l location) string {
	if l.neuron == "" {
		return filepath.Base(l.path)
	}
	return path.Base(l.path)
}

func joinFor(l location, elem ...string) string {
	if l.neuron == "" {
		return filepath.Join(append([]string{l.path}, elem...)...)
	}
	return path.Join(append([]string{l.path}, elem...)...)
}

// copyFile copies one file between any two locations, streaming.
func copyFile(ctx context.Context, src, dst location, mode fs.FileMode) error {
	switch {
	case src.neuron == "":
		f, err := os.Open(src.path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = dst.client.WriteFileFrom(ctx, dst.path, f, &link.WriteOptions{Mode: mode})
		return err
	case dst.neuron == "":
		dir, err := hostfs.Open(filepath.Dir(dst.path))
		if err != nil {
			return err
		}
		defer dir.Close()
		return receiveFile(ctx, src, dir, filepath.Base(dst.path), mode)
	}
	// Neuron to neuron: stream through a pipe.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := src.client.ReadFileTo(ctx, src.path, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	_, werr := dst.client.WriteFileFrom(ctx, dst.path, pr, &link.WriteOptions{Mode: mode})
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
func receiveFile(ctx context.Context, src location, dir *hostfs.Dir, name string, mode fs.FileMode) error {
	tmp, tmpName, err := dir.CreateTemp("."+name+".cortex-", 0o600)
	if err != nil {
		return err
	}
	_, err = src.client.ReadFileTo(ctx, src.path, tmp)
	if err == nil {
		err = tmp.Chmod(mode.Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
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
func (a *App) copyTree(ctx context.Context, src, dst location) error {
	entries, skipped, err := a.walk(ctx, src)
	if err != nil {
		return err
	}
	if dst.neuron == "" {
		err = receiveTree(ctx, src, dst.path, entries)
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
// something else than what the entry says fails the copy. dst itself is
// the operator's path and is resolved as written.
func receiveTree(ctx context.Context, src location, dst string, entries []entry) error {
	if err := os.Mkdir(dst, entries[0].mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	root, err := hostfs.Open(dst)
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
			s.path = joinFor(src, e.rel)
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
func sendTree(ctx context.Context, src, dst location, entries []entry) error {
	for _, e := range entries {
		s, d := src, dst
		s.path, d.path = joinFor(src, e.rel), joinFor(dst, e.rel)
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
func (a *App) walk(ctx context.Context, src location) ([]entry, int, error) {
	var entries []entry
	skipped := 0
	if src.neuron == "" {
		err := filepath.WalkDir(src.path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src.path, p)
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
				fmt.Fprintf(a.Stderr, "cp: skipping %s (not a file, directory or symlink)\n", p)
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
			return fmt.Errorf("cp: %s:%s nests deeper than %d directories", src.neuron, path.Join(src.path, rel), maxTreeDepth)
		}
		list, err := src.client.List(ctx, path.Join(src.path, rel))
		if err != nil {
			return err
		}
		// The listing is the neuron's: check it here too (a daemon's
		// client has not), so that no name leads outside the tree.
		seen := make(map[string]bool, len(list))
		for _, fi := range list {
			if err := fi.CheckEntry(); err != nil {
				return fmt.Errorf("cp: %s:%s: refusing the listing: %v", src.neuron, path.Join(src.path, rel), err)
			}
			if seen[fi.Name] {
				return fmt.Errorf("cp: %s:%s: %q is listed twice (it changed while it was read); try again", src.neuron, path.Join(src.path, rel), fi.Name)
			}
			seen[fi.Name] = true
			if len(entries) >= maxTreeEntries {
				return fmt.Errorf("cp: %s:%s holds more than %d entries", src.neuron, src.path, maxTreeEntries)
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
				fmt.Fprintf(a.Stderr, "cp: skipping %s:%s (%s)\n", src.neuron, path.Join(src.path, e.rel), fi.Type)
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
func makeDir(ctx context.Context, d location) error {
	fi, err := d.client.Lstat(ctx, d.path)
	switch {
	case protocol.HasCode(err, protocol.CodeNotFound):
		_, err = d.client.Mkdir(ctx, d.path)
		return err
	case err != nil:
		return err
	case fi.Type != protocol.TypeDir:
		return fmt.Errorf("cp: %s exists and is a %s, not a directory: a copy never writes through it", d, fi.Type)
	}
	return nil
}

// makeSymlink creates (or replaces) the symlink d in a neuron.
func makeSymlink(ctx context.Context, d location, target string) error {
	if fi, err := d.client.Lstat(ctx, d.path); err == nil && fi.Type == protocol.TypeSymlink {
		if err := d.client.Remove(ctx, d.path, false); err != nil {
			return err
		}
	}
	return d.client.Symlink(ctx, target, d.path)
}
