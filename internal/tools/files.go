package tools

import (
	"context"
	"fmt"
	"hash/maphash"
	"io/fs"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/tools/patch"
	"github.com/nsys-cortex/cortex/internal/tools/textedit"
)

type readIn struct {
	Path   string `json:"path" jsonschema:"file to read: absolute, or relative to the neuron's workdir"`
	Offset int    `json:"offset,omitempty" jsonschema:"first line to show (1-based); for long files"`
	Limit  int    `json:"limit,omitempty" jsonschema:"how many lines to show (default 2000)"`
}

var readTool = define("read", GroupFSRead, Annotations{ReadOnly: true, Idempotent: true},
	"Read a text file of the neuron. Lines are numbered (cat -n style); long lines and long files are cut with a note saying how to continue (offset, limit). Binary files are described, not shown.",
	func(s *jsonschema.Schema) { bounds(s, "offset", 0, 1<<31); bounds(s, "limit", 0, 1<<31) },
	func(in *readIn) *subject { return &subject{Reads: []string{in.Path}} },
	func(ctx context.Context, c *call, in *readIn) (*Result, error) {
		p := c.path(in.Path)
		data, err := c.readFile(ctx, p)
		if err != nil {
			return nil, err
		}
		if textedit.IsBinary(data) {
			return text(textedit.DescribeBinary(p, data)), nil
		}
		c.kit.remember(p, data)
		r, err := textedit.Format(data, textedit.ReadOptions{Offset: in.Offset, Limit: in.Limit, MaxChars: c.res.MaxOutputChars})
		if err != nil {
			return nil, err
		}
		return text(r.Text), nil
	})

// readFile reads a whole file within the policy's size limit.
func (c *call) readFile(ctx context.Context, p string) ([]byte, error) {
	data, _, err := c.readFileCached(ctx, p)
	return data, err
}

// readFileCached is readFile, saying whether the content came from the
// kit's cache (then it is what the agent last read or wrote).
func (c *call) readFileCached(ctx context.Context, p string) ([]byte, bool, error) {
	cl, err := c.channel(ctx)
	if err != nil {
		return nil, false, err
	}
	st, err := cl.Stat(ctx, p)
	if err != nil {
		return nil, false, err
	}
	switch st.Type {
	case protocol.TypeFile:
	case protocol.TypeDir:
		return nil, false, fmt.Errorf("%s is a directory: use ls", p)
	default: // a device (/dev/zero never ends), a fifo, a socket
		return nil, false, fmt.Errorf("%s is not a regular file (%s): file tools read regular files only", p, st.Type)
	}
	if max := c.res.MaxFileBytes; max > 0 && st.Size > max {
		return nil, false, fmt.Errorf("%s is %s, over this policy's %s limit for file tools: read parts of it with bash (head, sed -n, grep)", p, sizeText(st.Size), sizeText(max))
	}
	if data, ok := c.kit.cached(p, st); ok {
		return data, true, nil // what the agent last read or wrote, and the file's size and mtime say it is still that
	}
	data, err := cl.ReadFile(ctx, p)
	if err == nil {
		c.kit.keep(p, st, data)
	}
	return data, false, err
}

// contentCache bounds what a kit keeps of files' contents (all of it is
// dropped when it would grow past this).
const contentCache = 64 << 20

// cachedFile is a file's content as the agent last read or wrote it, with
// the size and modification time it had then.
type cachedFile struct {
	size  int64
	mtime time.Time
	data  []byte
}

// keep caches data as p's content while p has st's size and mtime.
func (k *Kit) keep(p string, st *protocol.FileInfo, data []byte) {
	if st == nil || st.ModTime.IsZero() || int64(len(data)) != st.Size || len(data) > contentCache/4 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.files[p]; ok {
		k.fileBytes -= len(old.data)
	}
	if k.fileBytes+len(data) > contentCache {
		clear(k.files)
		k.fileBytes = 0
	}
	k.files[p] = cachedFile{size: st.Size, mtime: st.ModTime, data: data}
	k.fileBytes += len(data)
}

// cached returns p's cached content if st (a fresh stat) still matches it.
// A change that keeps both the size and the nanosecond mtime is not seen;
// the cache only spares a transfer, it is not a security check.
func (k *Kit) cached(p string, st *protocol.FileInfo) ([]byte, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.files[p]
	if !ok || f.size != st.Size || !f.mtime.Equal(st.ModTime) {
		return nil, false
	}
	return f.data, true
}

// remember records what the agent last read of p. The hash is seeded per
// kit, so no one can make a changed file collide with the one read.
func (k *Kit) remember(p string, data []byte) {
	h := maphash.Bytes(k.seed, data)
	k.mu.Lock()
	k.reads[p] = h
	k.mu.Unlock()
}

// known reports whether the agent read or wrote p in this kit.
func (k *Kit) known(p string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.reads[p]
	return ok
}

// unchanged fails when p changed since the agent last read or wrote it.
func (k *Kit) unchanged(p string, current []byte) error {
	k.mu.Lock()
	h, ok := k.reads[p]
	k.mu.Unlock()
	if ok && h != maphash.Bytes(k.seed, current) {
		return fmt.Errorf("%s changed since you last read it (another process or tool wrote it): read it again, then edit", p)
	}
	return nil
}

type writeIn struct {
	Path    string `json:"path" jsonschema:"file to write: absolute, or relative to the workdir; parent directories are created"`
	Content string `json:"content" jsonschema:"the whole new content of the file"`
}

var writeTool = define("write", GroupFSWrite, Annotations{Destructive: true, Idempotent: true},
	"Create or replace a file of the neuron with the given content (parent directories are created). To change part of a file use edit.",
	nil,
	func(in *writeIn) *subject { return &subject{Writes: []string{in.Path}} },
	func(ctx context.Context, c *call, in *writeIn) (*Result, error) {
		p := c.path(in.Path)
		if max := c.res.MaxFileBytes; max > 0 && int64(len(in.Content)) > max {
			return nil, fmt.Errorf("content is %s, over this policy's %s limit for file tools", sizeText(int64(len(in.Content))), sizeText(max))
		}
		cl, err := c.channel(ctx)
		if err != nil {
			return nil, err
		}
		defer c.kit.lockPaths(p)()
		verb := "created"
		if _, err := cl.Stat(ctx, p); err == nil {
			// Replacing a file: only one the agent has read (or written),
			// and only if it has not changed since.
			if !c.kit.known(p) {
				return nil, fmt.Errorf("%s exists and you have not read it: read it first (or use edit to change part of it)", p)
			}
			old, err := c.readFile(ctx, p)
			if err != nil {
				return nil, err
			}
			if err := c.kit.unchanged(p, old); err != nil {
				return nil, err
			}
			verb = "replaced"
		} else if !errdefs.IsNotFound(err) {
			return nil, err
		}
		if err := cl.WriteFile(ctx, p, []byte(in.Content), &link.WriteOptions{Parents: true}); err != nil {
			return nil, err
		}
		c.kit.remember(p, []byte(in.Content))
		return textf("%s %s (%d bytes, %d lines)", verb, p, len(in.Content), lineCount(in.Content)), nil
	})

type editOne struct {
	OldString  string `json:"old_string" jsonschema:"exact text to replace (with enough context to be unique)"`
	NewString  string `json:"new_string" jsonschema:"the replacement"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of requiring exactly one"`
}

type editIn struct {
	Path       string    `json:"path" jsonschema:"file to edit"`
	OldString  string    `json:"old_string,omitempty" jsonschema:"exact text to replace; must occur once unless replace_all"`
	NewString  string    `json:"new_string,omitempty" jsonschema:"the replacement"`
	ReplaceAll bool      `json:"replace_all,omitempty" jsonschema:"replace every occurrence"`
	Edits      []editOne `json:"edits,omitempty" jsonschema:"several replacements applied in order, all or none (instead of old_string/new_string)"`
}

var editTool = define("edit", GroupFSWrite, Annotations{Destructive: true},
	"Replace exact text in a file of the neuron. old_string must occur exactly once (add context) unless replace_all. Give edits for several replacements at once: all apply or none. Line endings (CRLF) and a BOM are kept. Refuses if the file changed since you last read it.",
	nil,
	func(in *editIn) *subject { return &subject{Reads: []string{in.Path}, Writes: []string{in.Path}} },
	func(ctx context.Context, c *call, in *editIn) (*Result, error) {
		edits := make([]textedit.Edit, 0, len(in.Edits)+1)
		switch {
		case len(in.Edits) > 0 && (in.OldString != "" || in.NewString != ""):
			return nil, &InputError{Tool: "edit", Field: "edits", Msg: "give either edits or old_string/new_string, not both"}
		case len(in.Edits) > 0:
			for _, e := range in.Edits {
				edits = append(edits, textedit.Edit{OldString: e.OldString, NewString: e.NewString, ReplaceAll: e.ReplaceAll})
			}
		default:
			edits = append(edits, textedit.Edit{OldString: in.OldString, NewString: in.NewString, ReplaceAll: in.ReplaceAll})
		}
		p := c.path(in.Path)
		defer c.kit.lockPaths(p)()
		data, hit, err := c.readFileCached(ctx, p)
		if err != nil {
			return nil, err
		}
		if !hit { // a cached content is the one remembered
			if err := c.kit.unchanged(p, data); err != nil {
				return nil, err
			}
		}
		out, n, err := textedit.Apply(data, edits)
		if err != nil {
			return nil, err
		}
		cl, err := c.channel(ctx)
		if err != nil {
			return nil, err
		}
		st, err := cl.WriteFileStat(ctx, p, out, nil)
		if err != nil {
			return nil, err
		}
		c.kit.remember(p, out)
		if st == nil { // an older agent, or a large file: ask
			st, _ = cl.Stat(ctx, p)
		}
		if st != nil {
			c.kit.keep(p, st, out) // the next edit need not read it back
		}
		return textf("edited %s: %d replacement%s", p, n, plural(n)), nil
	})

type patchIn struct {
	Patch string `json:"patch" jsonschema:"the patch, from *** Begin Patch to *** End Patch"`
}

var applyPatchTool = define("apply_patch", GroupFSWrite, Annotations{Destructive: true},
	`Apply a patch in the apply_patch format to files of the neuron:
*** Begin Patch
*** Add File: path        (then +lines)
*** Delete File: path
*** Update File: path     (optionally *** Move to: newpath; then hunks: @@ context, ' ' context, '-' removed, '+' added lines)
*** End Patch
Context is matched exactly, then ignoring trailing whitespace, then with Unicode punctuation normalised. All or nothing: if any hunk fails, no file changes.`,
	nil,
	func(in *patchIn) *subject {
		p, err := patch.Parse(in.Patch)
		if err != nil {
			return &subject{} // run reports the parse error
		}
		s := &subject{}
		for _, op := range p.Ops {
			s.Writes = append(s.Writes, op.Path)
			if op.Op != patch.Add { // updated and deleted files are read first (and quoted in errors)
				s.Reads = append(s.Reads, op.Path)
			}
			if op.MoveTo != "" {
				s.Writes = append(s.Writes, op.MoveTo)
			}
		}
		return s
	},
	func(ctx context.Context, c *call, in *patchIn) (*Result, error) {
		p, err := patch.Parse(in.Patch)
		if err != nil {
			return nil, err
		}
		// One file named two ways ("a.txt", "/ws/a.txt", "x/../a.txt") would
		// be two sections to the patch: refuse it, or a hunk is lost.
		seen := map[string]string{}
		var all []string
		for _, op := range p.Ops {
			for _, name := range []string{op.Path, op.MoveTo} {
				if name == "" {
					continue
				}
				r := c.path(name)
				if first, dup := seen[r]; dup && first != name {
					return nil, fmt.Errorf("the patch names %s twice (%q and %q): use one name per file", r, first, name)
				}
				seen[r] = name
				all = append(all, r)
			}
		}
		defer c.kit.lockPaths(all...)()
		cl, err := c.channel(ctx)
		if err != nil {
			return nil, err
		}
		changes, err := patch.Apply(ctx, &patchFS{c: c, cl: cl}, p)
		if err != nil {
			return nil, err
		}
		return textf("applied:\n%s", patch.Summary(changes)), nil
	})

// patchFS is the neuron's files as the patch package sees them, through
// the paths the policy judged.
type patchFS struct {
	c  *call
	cl *link.Client
}

func (f *patchFS) ReadFile(ctx context.Context, p string) ([]byte, error) {
	rp := f.c.path(p)
	data, err := f.c.readFile(ctx, rp)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	if err == nil {
		err = f.c.kit.unchanged(rp, data)
	}
	return data, err
}

func (f *patchFS) WriteFile(ctx context.Context, p string, data []byte) error {
	rp := f.c.path(p)
	if max := f.c.res.MaxFileBytes; max > 0 && int64(len(data)) > max {
		return fmt.Errorf("%s would be %s, over this policy's %s limit for file tools", p, sizeText(int64(len(data))), sizeText(max))
	}
	if err := f.cl.WriteFile(ctx, rp, data, &link.WriteOptions{Parents: true}); err != nil {
		return err
	}
	f.c.kit.remember(rp, data)
	return nil
}

func (f *patchFS) Remove(ctx context.Context, p string) error {
	return f.cl.Remove(ctx, f.c.path(p), false)
}

type lsIn struct {
	Path   string `json:"path,omitempty" jsonschema:"directory to list (default: the workdir)"`
	Hidden bool   `json:"hidden,omitempty" jsonschema:"include entries whose names start with a dot"`
}

// lsMax bounds one listing.
const lsMax = 1000

var lsTool = define("ls", GroupFSRead, Annotations{ReadOnly: true, Idempotent: true},
	"List a directory of the neuron: one entry per line, directories with a trailing /, symlinks as name -> target, files with their size.",
	nil,
	func(in *lsIn) *subject { return &subject{Reads: []string{orDot(in.Path)}} },
	func(ctx context.Context, c *call, in *lsIn) (*Result, error) {
		p := c.path(orDot(in.Path))
		cl, err := c.channel(ctx)
		if err != nil {
			return nil, err
		}
		entries, err := cl.List(ctx, p)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s:\n", p)
		shown, hidden := 0, 0
		for _, e := range entries {
			if !in.Hidden && strings.HasPrefix(e.Name, ".") {
				hidden++
				continue
			}
			if shown == lsMax {
				fmt.Fprintf(&b, "[… %d more entries]\n", len(entries)-shown-hidden)
				break
			}
			shown++
			switch e.Type {
			case protocol.TypeDir:
				fmt.Fprintf(&b, "%s/\n", e.Name)
			case protocol.TypeSymlink:
				fmt.Fprintf(&b, "%s -> %s\n", e.Name, e.Target)
			case protocol.TypeFile:
				fmt.Fprintf(&b, "%s  (%s)\n", e.Name, sizeText(e.Size))
			default:
				fmt.Fprintf(&b, "%s  [%s]\n", e.Name, e.Type)
			}
		}
		if shown == 0 {
			b.WriteString("(empty)\n")
		}
		if hidden > 0 {
			fmt.Fprintf(&b, "(%d hidden entr%s; hidden=true shows them)\n", hidden, map[bool]string{true: "y", false: "ies"}[hidden == 1])
		}
		return text(strings.TrimSuffix(b.String(), "\n")), nil
	})

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func lineCount(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}
