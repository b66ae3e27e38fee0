package patch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
)

var parseSeeds = []string{
	"*** Begin Patch\n*** Add File: a/new.txt\n+one\n+two\n*** End Patch\n",
	"*** Begin Patch\n*** Delete File: old.txt\n*** End Patch",
	"*** Begin Patch\n*** Update File: f.py\n*** Move to: g.py\n@@ class A:\n@@     def f(self):\n-        pass\n+        return 1\n@@\n x\n+y\n*** End of File\n*** End Patch",
	"apply_patch <<'EOF'\r\n*** Begin Patch\r\n*** Update File: f\r\n a\r\n\r\n-b\r\n*** End Patch\r\nEOF\r\n",
	"*** Begin Patch\n*** Update File: f\n@@ -1,2 +1,2 @@ func g() {\n-a\n+b\n\n*** Add File: x\n+1\n\n+2\n*** End Patch",
	"*** Begin Patch\n*** Update File: f\n@@\n+only added\n*** End of File\n*** End Patch",
	"*** Begin Patch\n*** Update File: f\n *** not a marker\n @@ nor a header\n-x\n*** End Patch\n*** End Patch",
}

// FuzzParse checks that Parse never panics, that what it accepts is well
// formed, and that applying it to an empty tree, or to one where every file
// it names exists, never panics either.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse(text)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 {
				t.Fatalf("error %v is not a ParseError with a line", err)
			}
			return
		}
		files := map[string]string{}
		for _, op := range p.Ops {
			if op.Path == "" || op.Op < Add || op.Op > Update {
				t.Fatalf("bad op %+v", op)
			}
			if op.Op == Update && len(op.Hunks) == 0 && op.MoveTo == "" {
				t.Fatalf("update without hunks: %+v", op)
			}
			files[op.Path] = text
		}
		ctx := context.Background()
		_, _ = Apply(ctx, newMemFS(nil), p) // only panics matter here
		fsys := newMemFS(files)
		changes, err := Apply(ctx, fsys, p)
		if err != nil {
			if got := fsys.snapshot(); !maps.Equal(got, newMemFS(files).snapshot()) {
				t.Fatalf("failed Apply changed files: %v", err)
			}
			return
		}
		if len(changes) != len(p.Ops) {
			t.Fatalf("%d changes for %d ops", len(changes), len(p.Ops))
		}
		_ = Summary(changes)
	})
}

// FuzzApply turns random content into a file, derives a random edit of it
// (deleting, keeping and inserting lines), writes the patch a model would
// for that edit, and checks that applying the patch gives exactly the edited
// file.
func FuzzApply(f *testing.F) {
	f.Add("a\nb\nc\nd\ne\n", []byte{0, 1, 2, 3, 4, 5, 6, 7}, false)
	f.Add("x\nx\nx\nx\n", []byte{3, 0, 9, 4, 0, 2}, true)
	f.Add("", []byte{0, 0}, false)
	f.Add("no newline", []byte{1, 3, 0}, false)
	f.Add("\uFEFFbom\n\n\n  spaced  \n*** End Patch\n@@ x\n", []byte{8, 0, 3, 1, 0, 4, 4, 2, 0}, true)
	f.Fuzz(func(t *testing.T, content string, choices []byte, crlf bool) {
		content = strings.ReplaceAll(content, "\r", "")
		body, hasBOM := strings.CutPrefix(content, bom)
		lines, finalNL := fileLines(body)
		g := &gen{lines: lines, r: choices}
		items := g.script()
		text, ok := g.patchText(items)
		if !ok {
			return // no change to make
		}
		eol := "\n"
		if crlf && (len(lines) > 1 || len(lines) == 1 && finalNL) { // else the file has no line ending to copy
			eol = "\r\n"
		}
		render := func(ls []string) string {
			s := ""
			if len(ls) > 0 {
				s = strings.Join(ls, eol)
				if finalNL {
					s += eol
				}
			}
			if hasBOM {
				s = bom + s
			}
			return s
		}
		var want []string
		for _, it := range items {
			if it.op != '-' {
				want = append(want, it.text)
			}
		}
		p, err := Parse(text)
		if err != nil {
			t.Fatalf("%v\npatch:\n%s", err, text)
		}
		fsys := newMemFS(map[string]string{"f.txt": render(lines)})
		if _, err := Apply(context.Background(), fsys, p); err != nil {
			t.Fatalf("%v\nfile: %q\npatch:\n%s", err, render(lines), text)
		}
		if got := fsys.snapshot()["f.txt"]; got != render(want) {
			t.Fatalf("got  %q\nwant %q\nfile: %q\npatch:\n%s", got, render(want), render(lines), text)
		}
	})
}

// fileLines splits a file the way the patcher does.
func fileLines(s string) ([]string, bool) {
	if s == "" {
		return nil, true
	}
	finalNL := strings.HasSuffix(s, "\n")
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n"), finalNL
}

type item struct {
	op   byte // ' ' kept, '-' deleted, '+' inserted
	text string
	orig int // number of original lines before this item
}

// gen derives an edit and its patch from a stream of random choices.
type gen struct {
	lines []string
	r     []byte
	added int
}

func (g *gen) next() int {
	if len(g.r) == 0 {
		return 0
	}
	b := g.r[0]
	g.r = g.r[1:]
	return int(b)
}

// script decides, for each original line, whether to keep or delete it and
// what to insert before it (or at the end).
func (g *gen) script() []item {
	var items []item
	for i := 0; i <= len(g.lines); i++ {
		if c := g.next(); c%4 == 0 {
			for range 1 + (c/4)%3 {
				text := fmt.Sprintf("added %d", g.added)
				if c&0x40 != 0 && len(g.lines) > 0 {
					text = g.lines[g.next()%len(g.lines)] // a duplicate line
				}
				g.added++
				items = append(items, item{op: '+', text: text, orig: i})
			}
		}
		if i < len(g.lines) {
			op := byte(' ')
			if g.next()%3 == 0 {
				op = '-'
			}
			items = append(items, item{op: op, text: g.lines[i], orig: i})
		}
	}
	return items
}

// firstExact is an independent search: the first index at or after from
// where pat occurs exactly in lines, or -1.
func firstExact(lines, pat []string, from int) int {
	for at := from; at+len(pat) <= len(lines); at++ {
		ok := true
		for i, s := range pat {
			if lines[at+i] != s {
				ok = false
				break
			}
		}
		if ok {
			return at
		}
	}
	return -1
}

// patchText writes an Update patch for items with a random amount of
// context, extending a hunk's context back to the previous hunk when the
// patcher would otherwise find its lines earlier in the file.
func (g *gen) patchText(items []item) (string, bool) {
	ctxLines := g.next() % 4
	var b strings.Builder
	b.WriteString("*** Begin Patch\n*** Update File: f.txt\n")
	hunks, prevEnd := 0, 0 // prevEnd: item index after the previous hunk
	for p := 0; p < len(items); p++ {
		if items[p].op == ' ' {
			continue
		}
		start := p
		for start > prevEnd && p-start < ctxLines && items[start-1].op == ' ' {
			start--
		}
		end, keepRun := p+1, 0
		for j := p + 1; j < len(items) && keepRun <= 2*ctxLines; j++ {
			if items[j].op == ' ' {
				keepRun++
			} else {
				keepRun, end = 0, j+1
			}
		}
		for stop := end; end < len(items) && end-stop < ctxLines && items[end].op == ' '; end++ {
		}
		cursor := origAfter(items, prevEnd, len(g.lines))
		if firstExact(g.lines, oldOf(items[start:end]), cursor) != items[start].orig {
			start = prevEnd
		}
		hunk := items[start:end]
		old := oldOf(hunk)
		origStart, origEnd := items[start].orig, origAfter(items, end, len(g.lines))
		header := "@@"
		if origStart > cursor && g.next()%2 == 0 {
			h := g.lines[origStart-1]
			if h != "" && headerContext("@@ "+h) == h && firstExact(g.lines, []string{h}, cursor) == origStart-1 &&
				(len(old) == 0 || firstExact(g.lines, old, origStart-1) == origStart) {
				header = "@@ " + h
			}
		}
		if hunks > 0 || header != "@@" || hunk[0].text == "" || g.next()%2 == 0 {
			b.WriteString(header + "\n")
		}
		for _, it := range hunk {
			if it.op == ' ' && it.text == "" && g.next()%2 == 0 {
				b.WriteString("\n") // the lost-space leniency
			} else {
				b.WriteString(string(it.op) + it.text + "\n")
			}
		}
		if origEnd == len(g.lines) && g.next()%2 == 0 {
			b.WriteString("*** End of File\n")
		}
		hunks++
		prevEnd, p = end, end-1
	}
	b.WriteString("*** End Patch\n")
	return b.String(), hunks > 0
}

func oldOf(items []item) []string {
	var old []string
	for _, it := range items {
		if it.op != '+' {
			old = append(old, it.text)
		}
	}
	return old
}

// origAfter is the number of original lines before items[i], or all n of
// them when i is past the end.
func origAfter(items []item, i, n int) int {
	if i < len(items) {
		return items[i].orig
	}
	return n
}
