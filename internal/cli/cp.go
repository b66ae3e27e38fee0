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

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// location is one side of a copy: a local path, stdin/stdout ("-"), or a
// path in a neuron.
type location struct {
	neuron string // empty for local
	path   string
	client *link.Client
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
		Long: `cp copies a file or a directory tree. A neuron path is written ID:path: a
relative path is taken from the neuron's workdir, an absolute one is the path
as the neuron sees it (in process mode it must lie inside the workdir). "-" is
stdin (as SRC) or stdout (as DST), for a single file.

  nsys-cortex cp ./report.csv demo:data/       # into the neuron's workdir/data/
  nsys-cortex cp demo:out/result.json .        # out of it
  nsys-cortex cp demo:src other:src            # between neurons`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			if src.neuron == "" && dst.neuron == "" {
				return errors.New("cp: neither side names a neuron (write ID:path)")
			}
			clients := map[string]*link.Client{}
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
		_, err := dst.client.WriteFileFrom(ctx, dst.path, a.Stdin, &link.WriteOptions{Parents: true})
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
	// Copying into an existing directory (or a path ending in /) puts the
	// source inside it, under its own name.
	if into, err := isDir(ctx, dst); err != nil {
		return err
	} else if into || strings.HasSuffix(dst.path, "/") {
		dst.path = joinFor(dst, baseName(src))
	}
	if srcDir {
		return a.copyTree(ctx, src, dst)
	}
	return copyFile(ctx, src, dst, srcMode)
}

func (a *App) statSource(ctx context.Context, src location) (bool, fs.FileMode, error) {
	if src.neuron == "" {
		st, err := os.Stat(src.path)
		if err != nil {
			return false, 0, err
		}
		return st.IsDir(), st.Mode().Perm(), nil
	}
	fi, err := src.client.Stat(ctx, src.path)
	if err != nil {
		return false, 0, err
	}
	return fi.Type == protocol.TypeDir, fs.FileMode(fi.Mode), nil
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
		_, err = dst.client.WriteFileFrom(ctx, dst.path, f, &link.WriteOptions{Mode: mode, Parents: true})
		return err
	case dst.neuron == "":
		if err := os.MkdirAll(filepath.Dir(dst.path), 0o755); err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst.path), "."+filepath.Base(dst.path)+".cortex-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
		_, err = src.client.ReadFileTo(ctx, src.path, tmp)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), mode)
		}
		if err != nil {
			return err
		}
		return os.Rename(tmp.Name(), dst.path)
	}
	// Neuron to neuron: stream through a pipe.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := src.client.ReadFileTo(ctx, src.path, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	_, werr := dst.client.WriteFileFrom(ctx, dst.path, pr, &link.WriteOptions{Mode: mode, Parents: true})
	pr.CloseWithError(werr) // unblocks the reader if the writer gave up
	if rerr := <-done; rerr != nil && werr == nil {
		return rerr
	}
	return werr
}

// copyTree copies a directory tree; symlinks are reported and skipped.
func (a *App) copyTree(ctx context.Context, src, dst location) error {
	type entry struct {
		rel  string
		dir  bool
		mode fs.FileMode
	}
	var entries []entry
	if src.neuron == "" {
		err := filepath.WalkDir(src.path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src.path, p)
			info, err := d.Info()
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSymlink != 0 || !(d.IsDir() || d.Type().IsRegular()) {
				fmt.Fprintf(a.Stderr, "cp: skipping %s (not a file or directory)\n", p)
				return nil
			}
			entries = append(entries, entry{filepath.ToSlash(rel), d.IsDir(), info.Mode().Perm()})
			return nil
		})
		if err != nil {
			return err
		}
	} else {
		var walk func(rel string) error
		walk = func(rel string) error {
			list, err := src.client.List(ctx, path.Join(src.path, rel))
			if err != nil {
				return err
			}
			for _, fi := range list {
				r := path.Join(rel, fi.Name)
				switch fi.Type {
				case protocol.TypeDir:
					entries = append(entries, entry{r, true, fs.FileMode(fi.Mode)})
					if err := walk(r); err != nil {
						return err
					}
				case protocol.TypeFile:
					entries = append(entries, entry{r, false, fs.FileMode(fi.Mode)})
				default:
					fmt.Fprintf(a.Stderr, "cp: skipping %s:%s (%s)\n", src.neuron, path.Join(src.path, r), fi.Type)
				}
			}
			return nil
		}
		entries = append(entries, entry{".", true, 0o755})
		if err := walk("."); err != nil {
			return err
		}
	}
	for _, e := range entries {
		s, d := src, dst
		s.path, d.path = joinFor(src, e.rel), joinFor(dst, e.rel)
		if !e.dir {
			if err := copyFile(ctx, s, d, e.mode); err != nil {
				return err
			}
			continue
		}
		if d.neuron == "" {
			if err := os.MkdirAll(d.path, e.mode|0o700); err != nil {
				return err
			}
		} else if _, err := d.client.Mkdir(ctx, d.path); err != nil {
			return err
		}
	}
	return nil
}
