package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/nsys-cortex/cortex/internal/tools/textedit"
)

// FS is the file system a patch is applied to. Paths are the patch's paths,
// unchanged; the implementation resolves and confines them.
type FS interface {
	// ReadFile returns a file's content, or an error satisfying
	// errors.Is(err, fs.ErrNotExist) when there is no such file.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile creates or replaces a file, creating its parent directories.
	WriteFile(ctx context.Context, path string, data []byte) error
	// Remove deletes a file.
	Remove(ctx context.Context, path string) error
}

// Change is the effect of one FileOp: the file's content before (nil for
// Add) and after (nil for Delete). An Update with MoveTo writes New at MoveTo
// and removes Path.
type Change struct {
	Op     Op
	Path   string
	MoveTo string
	Old    []byte
	New    []byte
}

// Error is a patch that cannot be applied to the files as they are, or a
// file system failure while applying it. Its message names the file, and the
// hunk when one did not match.
type Error struct {
	Path string
	Hunk int    // 1-based hunk of the Update section; 0 when not about a hunk
	Line int    // 1-based patch line of the section or hunk
	Msg  string // what went wrong, for the model
	Err  error  // the underlying error, if any (fs.ErrNotExist, fs.ErrExist, an FS error)
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		if e.Hunk > 0 {
			fmt.Fprintf(&b, ": hunk %d (patch line %d)", e.Hunk, e.Line)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Err != nil && !errors.Is(e.Err, fs.ErrNotExist) && !errors.Is(e.Err, fs.ErrExist) {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Plan computes the change every section of p makes, reading files through
// fsys and writing nothing. Add fails if the file exists; Delete and Update
// fail if it does not; a move fails if its target exists; every hunk must be
// found. A path may appear in only one section. The first failure is
// returned as an *Error naming the file and hunk.
//
// Hunks are located in order with a moving cursor, as Codex does: first each
// "@@" context line is sought, then the Old lines, trying an exact match,
// then one ignoring trailing whitespace, then one ignoring leading and
// trailing whitespace, then one with typographic punctuation folded to ASCII.
// An End of File hunk is tried at the end of the file first. A hunk with no
// Old lines inserts at the cursor, or at the end for End of File. The New
// lines are written verbatim, with the file's dominant line ending; the
// file's other line endings, byte order mark and final-newline state are
// kept.
func Plan(ctx context.Context, fsys FS, p *Patch) ([]Change, error) {
	if err := checkPaths(p); err != nil {
		return nil, err
	}
	changes := make([]Change, 0, len(p.Ops))
	for _, op := range p.Ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := plan(ctx, fsys, op)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// checkPaths rejects empty paths and a path named by two sections (or one
// section's path and move target): Plan reads every file before writing any,
// so it could not honour an order between them.
func checkPaths(p *Patch) error {
	if p == nil || len(p.Ops) == 0 {
		return &Error{Msg: "the patch changes no files"}
	}
	seen := map[string]int{}
	for _, op := range p.Ops {
		if op.Path == "" {
			return &Error{Line: op.Line, Msg: fmt.Sprintf("the section at patch line %d has an empty path", op.Line)}
		}
		names := []string{op.Path}
		if op.MoveTo != "" && path.Clean(op.MoveTo) != path.Clean(op.Path) {
			names = append(names, op.MoveTo)
		}
		for _, name := range names {
			key := path.Clean(name)
			if line, ok := seen[key]; ok {
				return &Error{Path: name, Msg: fmt.Sprintf("named by more than one section (patch lines %d and %d); put all changes to a file in one section", line, op.Line)}
			}
			seen[key] = op.Line
		}
	}
	return nil
}

func plan(ctx context.Context, fsys FS, op FileOp) (Change, error) {
	c := Change{Op: op.Op, Path: op.Path}
	old, err := fsys.ReadFile(ctx, op.Path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return c, &Error{Path: op.Path, Msg: "cannot read the file", Err: err}
	}
	switch op.Op {
	case Add:
		if exists {
			return c, &Error{Path: op.Path, Msg: "cannot add the file: it already exists; use '*** Update File:' to change it, or delete it first", Err: fs.ErrExist}
		}
		c.New = []byte(op.Content)
		return c, nil
	case Delete:
		if !exists {
			return c, &Error{Path: op.Path, Msg: "cannot delete the file: it does not exist", Err: err}
		}
		c.Old = old
		return c, nil
	case Update:
		if !exists {
			return c, &Error{Path: op.Path, Msg: "cannot update the file: it does not exist; use '*** Add File:' to create it", Err: err}
		}
		c.Old = old
		if c.New, err = applyHunks(old, op); err != nil {
			return c, err
		}
		if op.MoveTo != "" && path.Clean(op.MoveTo) != path.Clean(op.Path) {
			c.MoveTo = op.MoveTo
			if _, err := fsys.ReadFile(ctx, op.MoveTo); err == nil {
				return c, &Error{Path: op.Path, Msg: fmt.Sprintf("cannot move the file to %s: that file already exists", op.MoveTo), Err: fs.ErrExist}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return c, &Error{Path: op.MoveTo, Msg: "cannot read the move target", Err: err}
			}
		}
		return c, nil
	}
	return c, &Error{Path: op.Path, Msg: fmt.Sprintf("unknown operation %v", op.Op)}
}

// applyHunks returns data with op's hunks applied.
func applyHunks(data []byte, op FileOp) ([]byte, error) {
	f := parseFile(data)
	texts := f.texts()
	m := newMatcher(texts)
	type replacement struct {
		at       int
		old, new []string
		pairs    map[int]int // context lines: index in old → index in new
	}
	var reps []replacement
	cursor := 0
	for k, h := range op.Hunks {
		fail := func(format string, args ...any) error {
			return &Error{Path: op.Path, Hunk: k + 1, Line: h.Line, Msg: fmt.Sprintf(format, args...)}
		}
		from := cursor // where Old may start: the last "@@" line itself, or the cursor
		for _, c := range h.Context {
			at := m.seek([]string{c}, cursor, false)
			if at < 0 {
				return nil, fail("could not find the '@@' line %q %s%s", c, after(cursor), closest(texts[cursor:], []string{c}, cursor))
			}
			from, cursor = at, at+1
		}
		old, repl := h.Old, h.New
		at := -1
		for {
			if len(old) == 0 {
				at = cursor
				if h.EOF {
					at = len(texts)
				}
				break
			}
			if at = m.seek(old, from, h.EOF); at >= 0 || old[len(old)-1] != "" {
				break
			}
			// A trailing blank line in a hunk is often the separator before
			// the next marker, not a line of the file; retry without it.
			old = old[:len(old)-1]
			if len(repl) > 0 && repl[len(repl)-1] == "" {
				repl = repl[:len(repl)-1]
			}
		}
		if at < 0 {
			return nil, fail("could not find these lines %s:\n%s%s\nRead the file again and make the context and '-' lines match it exactly",
				after(cursor), indent(h.Old), closest(texts[cursor:], h.Old, cursor))
		}
		reps = append(reps, replacement{at, old, repl, contextPairs(h, old, repl)})
		cursor = at + len(old)
	}
	out := make([]line, 0, len(f.lines))
	next := 0 // first line of f not yet copied
	for _, r := range reps {
		out = append(out, f.lines[next:r.at]...)
		added := make([]line, len(r.new))
		for j, s := range r.new {
			added[j] = line{text: s}
		}
		// A context line keeps the file's text and line ending: it may have
		// matched only loosely, and the patch did not ask to change it.
		for oi, ni := range r.pairs {
			added[ni] = f.lines[r.at+oi]
		}
		out = append(out, added...)
		next = r.at + len(r.old)
	}
	f.lines = append(out, f.lines[next:]...)
	return f.bytes(), nil
}

// after says where a search started, for an error message.
func after(cursor int) string {
	if cursor == 0 {
		return "in the file"
	}
	return fmt.Sprintf("after line %d", cursor)
}

// contextPairs maps h's context lines from their index in old to their index
// in new, where old and new are h.Old and h.New or prefixes of them.
func contextPairs(h Hunk, old, new []string) map[int]int {
	if len(h.echo) != len(h.New) {
		return commonLines(old, new)
	}
	pairs := map[int]int{}
	for j, i := range h.echo[:len(new)] {
		if i >= 0 && i < len(old) {
			pairs[i] = j
		}
	}
	return pairs
}

// commonLines pairs lines of old and new that a longest common subsequence
// keeps: the hunk's context lines. It maps old indices to new ones. Very
// large hunks are paired only on their common prefix and suffix.
func commonLines(old, new []string) map[int]int {
	pairs := map[int]int{}
	pre := 0
	for pre < len(old) && pre < len(new) && old[pre] == new[pre] {
		pairs[pre] = pre
		pre++
	}
	suf := 0
	for suf < len(old)-pre && suf < len(new)-pre && old[len(old)-1-suf] == new[len(new)-1-suf] {
		pairs[len(old)-1-suf] = len(new) - 1 - suf
		suf++
	}
	a, b := old[pre:len(old)-suf], new[pre:len(new)-suf]
	if len(a) == 0 || len(b) == 0 || len(a)*len(b) > 1<<20 {
		return pairs
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			pairs[pre+i] = pre + j
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			i++
		default:
			j++
		}
	}
	return pairs
}

// closest describes the lines most like want, for a hunk that did not match.
// lines[0] is line offset+1 of the file.
func closest(lines, want []string, offset int) string {
	start, score := textedit.MostSimilar(lines, want)
	if start < 0 || score < 0.5 {
		return ""
	}
	base := offset + start + 1
	end := min(start+len(want), len(lines))
	return fmt.Sprintf("\nThe most similar lines in the file are %d-%d (%d%% similar):\n%s", base, base+end-start-1, int(score*100), indent(lines[start:end]))
}

// indent quotes lines for an error message, bounded in size.
func indent(lines []string) string {
	const maxLines = 30
	var b strings.Builder
	for i, l := range lines {
		if i == maxLines {
			fmt.Fprintf(&b, "    [… %d more lines]\n", len(lines)-i)
			break
		}
		b.WriteString("    ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// step is one file system call of Apply and what undoes it.
type step struct {
	write   bool   // WriteFile(path, data), else Remove(path)
	path    string //
	data    []byte // for a write
	prev    []byte // content before the step; nil when the file did not exist
	existed bool
}

func steps(changes []Change) []step {
	var s []step
	for _, c := range changes {
		switch {
		case c.Op == Add:
			s = append(s, step{write: true, path: c.Path, data: c.New})
		case c.Op == Delete:
			s = append(s, step{path: c.Path, prev: c.Old, existed: true})
		case c.MoveTo != "":
			s = append(s, step{write: true, path: c.MoveTo, data: c.New},
				step{path: c.Path, prev: c.Old, existed: true})
		default:
			s = append(s, step{write: true, path: c.Path, data: c.New, prev: c.Old, existed: true})
		}
	}
	return s
}

// Apply plans p (see Plan) and writes every change. If a write or removal
// fails, or ctx is cancelled, part way, every file already touched is put
// back (rewritten, removed or recreated) before the error is returned, so the
// tree is as it was; a failure to put a file back is reported with the
// error. Directories that WriteFile created stay.
func Apply(ctx context.Context, fsys FS, p *Patch) ([]Change, error) {
	changes, err := Plan(ctx, fsys, p)
	if err != nil {
		return nil, err
	}
	todo := steps(changes)
	for i, s := range todo {
		verb, err := "write", ctx.Err()
		if err == nil && s.write {
			err = fsys.WriteFile(ctx, s.path, s.data)
		} else if err == nil {
			verb, err = "remove", fsys.Remove(ctx, s.path)
		}
		if err == nil {
			continue
		}
		// The failed step is undone too: a failed write may have
		// truncated the file.
		e := &Error{Path: s.path, Msg: "cannot " + verb + " the file", Err: err}
		if rb := rollback(context.WithoutCancel(ctx), fsys, todo[:i+1]); rb != nil {
			return nil, fmt.Errorf("%w; putting the files back also failed, so the patch is partly applied: %w", e, rb)
		}
		return nil, fmt.Errorf("%w; every file was put back as it was", e)
	}
	return changes, nil
}

// rollback undoes done, last first, and reports every failure.
func rollback(ctx context.Context, fsys FS, done []step) error {
	var errs []error
	for i := len(done) - 1; i >= 0; i-- {
		s := done[i]
		var err error
		if s.existed {
			err = fsys.WriteFile(ctx, s.path, s.prev)
		} else if err = fsys.Remove(ctx, s.path); errors.Is(err, fs.ErrNotExist) {
			err = nil // the failed write never created it
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.path, err))
		}
	}
	return errors.Join(errs...)
}

// Summary renders one line per change for a tool result: "A path" (added),
// "M path" (updated), "D path" (deleted), "R old -> new" (moved, possibly
// also updated).
func Summary(changes []Change) string {
	lines := make([]string, 0, len(changes))
	for _, c := range changes {
		switch {
		case c.Op == Add:
			lines = append(lines, "A "+c.Path)
		case c.Op == Delete:
			lines = append(lines, "D "+c.Path)
		case c.MoveTo != "":
			lines = append(lines, "R "+c.Path+" -> "+c.MoveTo)
		default:
			lines = append(lines, "M "+c.Path)
		}
	}
	return strings.Join(lines, "\n")
}
