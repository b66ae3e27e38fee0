package patch

import (
	"fmt"
	"regexp"
	"strings"
)

// Op is what a patch does to one file.
type Op int

// The operations of a patch.
const (
	Add Op = iota + 1
	Delete
	Update
)

func (o Op) String() string {
	switch o {
	case Add:
		return "add"
	case Delete:
		return "delete"
	case Update:
		return "update"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// ParseOp returns the Op whose String is s.
func ParseOp(s string) (Op, error) {
	for _, o := range []Op{Add, Delete, Update} {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("patch: unknown operation %q (want add, delete or update)", s)
}

// FileOp is one section of a patch: what to do to one file.
type FileOp struct {
	Op      Op
	Path    string
	MoveTo  string // Update only: rename the file to this path; "" keeps it
	Content string // Add only: the new file's text
	Hunks   []Hunk // Update only, in file order
	Line    int    // 1-based patch line of the section's header
}

// Hunk is one change inside an Update: the Old lines are replaced with the
// New lines. Context lines appear in both.
type Hunk struct {
	Context []string // "@@ text" headers: lines to seek to, in order, before matching Old
	Old     []string // context and removed lines, without their prefix
	New     []string // context and added lines, without their prefix
	EOF     bool     // "*** End of File": Old should match at the end of the file
	Line    int      // 1-based patch line where the hunk starts

	// echo[j] is the index in Old of the context line New[j] repeats, or -1
	// for an added line. Parse sets it; without it (a Hunk built by hand,
	// or edited) context lines are worked out by diffing Old and New.
	echo []int
}

// Patch is a parsed patch.
type Patch struct {
	Ops []FileOp
}

// ParseError is a patch that is not well formed; Line is 1-based in the text
// given to Parse.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("invalid patch: line %d: %s", e.Line, e.Msg)
}

const (
	beginMarker  = "*** Begin Patch"
	endMarker    = "*** End Patch"
	addMarker    = "*** Add File:"
	deleteMarker = "*** Delete File:"
	updateMarker = "*** Update File:"
	moveMarker   = "*** Move to:"
	eofMarker    = "*** End of File"
	sectionHelp  = "expected '*** Add File: PATH', '*** Delete File: PATH' or '*** Update File: PATH'"
)

// Parse parses a patch. Like Codex it tolerates whitespace and blank lines
// around markers, a heredoc wrapper (a first line such as
// "apply_patch <<'EOF'" and a last line "EOF"), CRLF line endings, empty
// context lines that lost their leading space, and blank lines inside an
// added file that lost their '+'. It also accepts several "@@" headers in a
// row (each is sought in turn) and unified-diff headers such as
// "@@ -12,5 +12,6 @@ func f()" (the text after the second "@@", if any, is
// the context). Errors are *ParseError values naming the line.
func Parse(text string) (*Patch, error) {
	p := &parser{lines: splitLines(text)}
	if err := p.envelope(); err != nil {
		return nil, err
	}
	var ops []FileOp
	for p.i < p.end {
		t := strings.TrimSpace(p.lines[p.i])
		var op FileOp
		var err error
		switch {
		case t == "":
			p.i++
			continue
		case strings.HasPrefix(t, addMarker):
			op, err = p.add(t)
		case strings.HasPrefix(t, deleteMarker):
			op, err = p.header(t, deleteMarker, Delete)
			p.i++
		case strings.HasPrefix(t, updateMarker):
			op, err = p.update(t)
		default:
			return nil, p.errorf(p.i, "%s, got %q", sectionHelp, t)
		}
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, p.errorf(p.end, "the patch changes no files; %s", sectionHelp)
	}
	return &Patch{Ops: ops}, nil
}

type parser struct {
	lines []string
	i     int // index of the next line to read
	end   int // index of the "*** End Patch" line
}

func (p *parser) errorf(i int, format string, args ...any) error {
	return &ParseError{Line: i + 1, Msg: fmt.Sprintf(format, args...)}
}

// splitLines splits text into lines without "\n" or "\r\n"; a final line
// ending adds no empty line.
func splitLines(text string) []string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// envelope finds the Begin and End markers, skipping blank lines and a
// heredoc wrapper, and leaves p.i after Begin and p.end at End.
func (p *parser) envelope() error {
	first := 0
	for first < len(p.lines) && blank(p.lines[first]) {
		first++
	}
	delim := ""
	if first < len(p.lines) {
		if d, ok := heredocDelim(p.lines[first]); ok {
			delim = d
			for first++; first < len(p.lines) && blank(p.lines[first]); first++ {
			}
		}
	}
	if first == len(p.lines) {
		return p.errorf(min(first, len(p.lines)-1), "the patch is empty; expected %q", beginMarker)
	}
	if t := strings.TrimSpace(p.lines[first]); t != beginMarker {
		return p.errorf(first, "expected %q, got %q", beginMarker, t)
	}
	last := len(p.lines) - 1
	for last > first && blank(p.lines[last]) {
		last--
	}
	if t := strings.TrimSpace(p.lines[last]); last > first && (t == delim || delim == "" && t == "EOF") {
		for last--; last > first && blank(p.lines[last]); last-- {
		}
	}
	if strings.TrimSpace(p.lines[last]) != endMarker || last == first {
		for i := last - 1; i > first; i-- {
			if strings.TrimSpace(p.lines[i]) == endMarker {
				return p.errorf(i+1, "unexpected text after %q", endMarker)
			}
		}
		return p.errorf(last, "expected %q as the last line (was the patch cut off?), got %q", endMarker, strings.TrimSpace(p.lines[last]))
	}
	p.i, p.end = first+1, last
	return nil
}

// heredocDelim recognises the first line of a shell heredoc such as
// "apply_patch <<'EOF'" or "<<EOF" and returns its delimiter.
func heredocDelim(line string) (string, bool) {
	_, rest, ok := strings.Cut(strings.TrimSpace(line), "<<")
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(strings.TrimPrefix(rest, "-"))
	d := strings.Trim(rest, `'"`)
	if d == "" || strings.ContainsAny(d, " \t'\"") {
		return "", false
	}
	return d, true
}

// header parses a section header "MARKER PATH".
func (p *parser) header(t, marker string, op Op) (FileOp, error) {
	path := strings.TrimSpace(strings.TrimPrefix(t, marker))
	if path == "" {
		return FileOp{}, p.errorf(p.i, "%q needs a path", marker+" ")
	}
	return FileOp{Op: op, Path: path, Line: p.i + 1}, nil
}

// add parses "*** Add File: PATH" and its '+' lines.
func (p *parser) add(t string) (FileOp, error) {
	op, err := p.header(t, addMarker, Add)
	if err != nil {
		return op, err
	}
	var content []string
	for p.i++; p.i < p.end; p.i++ {
		line := p.lines[p.i]
		if rest, ok := strings.CutPrefix(line, "+"); ok {
			content = append(content, rest)
			continue
		}
		if !blank(line) || !p.plusFollows(p.i) {
			break
		}
		content = append(content, "") // a blank line that lost its '+'
	}
	if len(content) > 0 {
		op.Content = strings.Join(content, "\n") + "\n"
	}
	return op, nil
}

// plusFollows reports whether the first non-blank line after i starts with '+'.
func (p *parser) plusFollows(i int) bool {
	for i++; i < p.end && blank(p.lines[i]); i++ {
	}
	return i < p.end && strings.HasPrefix(p.lines[i], "+")
}

// isMarker reports whether a line inside an update ends its hunks: "***"
// possibly indented, unless the indent is the single space of a context
// line.
func isMarker(line string) bool {
	return !strings.HasPrefix(line, " ") && strings.HasPrefix(strings.TrimSpace(line), "***")
}

// isHeader reports whether line is an "@@" hunk header.
func isHeader(line string) bool {
	return !strings.HasPrefix(line, " ") && strings.HasPrefix(strings.TrimSpace(line), "@@")
}

// unifiedHeader matches the line-number part of a unified diff hunk header
// after its leading "@@".
var unifiedHeader = regexp.MustCompile(`^-\d+(,\d+)? \+\d+(,\d+)? @@ ?`)

// headerContext returns the line an "@@" header asks to seek to, or "".
func headerContext(line string) string {
	rest := strings.TrimPrefix(strings.TrimSpace(line), "@@")
	rest = strings.TrimPrefix(rest, " ")
	if m := unifiedHeader.FindString(rest); m != "" {
		rest = rest[len(m):]
	}
	return rest
}

// update parses "*** Update File: PATH", an optional "*** Move to: PATH" and
// the hunks.
func (p *parser) update(t string) (FileOp, error) {
	op, err := p.header(t, updateMarker, Update)
	if err != nil {
		return op, err
	}
	p.i++
	if p.i < p.end {
		if mt := strings.TrimSpace(p.lines[p.i]); strings.HasPrefix(mt, moveMarker) {
			if op.MoveTo = strings.TrimSpace(strings.TrimPrefix(mt, moveMarker)); op.MoveTo == "" {
				return op, p.errorf(p.i, "%q needs a path", moveMarker+" ")
			}
			p.i++
		}
	}
	var h *Hunk   // the hunk being read
	body := false // h has body lines
	afterEOF := false
	finish := func() error {
		if h == nil {
			return nil
		}
		if !body {
			return p.errorf(h.Line-1, "hunk has no lines: after '@@' expected lines starting with ' ' (context), '-' (removed) or '+' (added)")
		}
		op.Hunks = append(op.Hunks, *h)
		h, body = nil, false
		return nil
	}
	for ; p.i < p.end; p.i++ {
		line := p.lines[p.i]
		switch {
		case isMarker(line):
			if strings.TrimSpace(line) != eofMarker {
				return p.endUpdate(&op, finish)
			}
			if !body {
				return op, p.errorf(p.i, "%q must follow the lines of a hunk", eofMarker)
			}
			h.EOF = true
			if err := finish(); err != nil {
				return op, err
			}
			afterEOF = true
			continue
		case isHeader(line):
			if body {
				if err := finish(); err != nil {
					return op, err
				}
			}
			if h == nil {
				h = &Hunk{Line: p.i + 1}
			}
			if c := headerContext(line); c != "" {
				h.Context = append(h.Context, c)
			}
			afterEOF = false
			continue
		case h == nil && (line == "" || blank(line) && line[0] != ' '):
			continue // blank lines between hunks; " " may be context
		case h == nil && afterEOF:
			return op, p.errorf(p.i, "expected '@@' to start a hunk after %q, got %q", eofMarker, line)
		case h == nil:
			h = &Hunk{Line: p.i + 1} // Codex allows the first hunk without "@@"
		}
		switch {
		case line == "":
			h.context("")
		case line[0] == ' ':
			h.context(line[1:])
		case line[0] == '-':
			h.Old = append(h.Old, line[1:])
		case line[0] == '+':
			h.New, h.echo = append(h.New, line[1:]), append(h.echo, -1)
		case blank(line):
			// A blank context line that lost its ' ' but kept other
			// whitespace; matching ignores trailing whitespace if need be.
			h.context(line)
		default:
			return op, p.errorf(p.i, "expected a hunk line starting with ' ' (context), '-' (removed) or '+' (added), or '@@', got %q", line)
		}
		body = true
	}
	return p.endUpdate(&op, finish)
}

// context adds a context line to h.
func (h *Hunk) context(s string) {
	h.echo = append(h.echo, len(h.Old))
	h.Old, h.New = append(h.Old, s), append(h.New, s)
}

// endUpdate finishes the last hunk of op, which finish appends to op.
func (p *parser) endUpdate(op *FileOp, finish func() error) (FileOp, error) {
	if err := finish(); err != nil {
		return *op, err
	}
	if len(op.Hunks) == 0 && op.MoveTo == "" {
		return *op, p.errorf(op.Line-1, "%q has no hunks: expected '@@' or lines starting with ' ', '-' or '+'", updateMarker+" "+op.Path)
	}
	return *op, nil
}
