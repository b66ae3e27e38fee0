//go:build linux

package link_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Search round-trips through a real agent: arguments, results and errors.
func TestSearchThroughTheChannel(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	for name, content := range map[string]string{
		"src/a.go":     "package src\n\nfunc Hello() {}\n",
		"src/b.go":     "package src\n// hello again\n",
		"src/c.txt":    "Hello text\n",
		"vendor/v.go":  "func Hello() {}\n",
		".gitignore":   "vendor/\n",
		"README.md":    "say hello\n",
		"bin/data.bin": "Hello\x00\x01",
	} {
		full := filepath.Join(p.root, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := p.client.Search(ctx, &protocol.SearchArgs{Path: ".", Pattern: "hello", IgnoreCase: true, Type: "go", Context: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.SearchMatch{
		{Path: "src/a.go", Line: 2, Text: "", Context: true},
		{Path: "src/a.go", Line: 3, Text: "func Hello() {}"},
		{Path: "src/b.go", Line: 1, Text: "package src", Context: true},
		{Path: "src/b.go", Line: 2, Text: "// hello again"},
	}
	if fmt.Sprint(res.Matches) != fmt.Sprint(want) || res.Truncated || res.FilesScanned != 2 {
		t.Errorf("got %+v", res)
	}
	res, err = p.client.Search(ctx, &protocol.SearchArgs{Path: ".", Pattern: "Hello", Mode: protocol.SearchModeFiles})
	if err != nil || strings.Join(res.Files, ",") != "src/a.go,src/c.txt" || res.SkippedBinary != 1 {
		t.Errorf("files: %+v %v", res, err)
	}
	// Validation happens before anything is sent; the agent checks too.
	if _, err := p.client.Search(ctx, &protocol.SearchArgs{Path: ".", Type: "nope", Pattern: "x"}); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("bad type: %v", err)
	}
	if _, err := p.client.Search(ctx, &protocol.SearchArgs{Path: "../..", Pattern: "x"}); !protocol.HasCode(err, protocol.CodePathEscape) {
		t.Errorf("escape: %v", err)
	}
	if _, err := p.client.Search(ctx, &protocol.SearchArgs{Path: ".", Glob: []string{"[x"}, Pattern: "x"}); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("bad glob: %v", err)
	}
}

// words make the benchmark's files look like source code.
var words = strings.Fields(`func return if else for range package import type struct interface map
string int error nil ctx context err value result config handler server client request response
buffer reader writer count index offset length name path file data list item node tree parse`)

// searchBenchTree writes a 20 000-file tree of source-like text (three
// levels, sizes from a few hundred bytes to ~40 KiB) under dir; about 1%
// of the files hold the needle.
func searchBenchTree(b *testing.B, dir string) {
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	for i := range 20000 {
		buf.Reset()
		lines := 10 + rng.IntN(60)
		if rng.IntN(10) == 0 {
			lines += rng.IntN(800)
		}
		needleAt := -1
		if i%100 == 7 {
			needleAt = rng.IntN(lines)
		}
		for l := range lines {
			buf.WriteString(strings.Repeat("\t", rng.IntN(3)))
			for w := range 3 + rng.IntN(8) {
				if w > 0 {
					buf.WriteByte(' ')
				}
				buf.WriteString(words[rng.IntN(len(words))])
			}
			if l == needleAt {
				buf.WriteString(" // quuxNeedle marker")
			}
			buf.WriteByte('\n')
		}
		p := filepath.Join(dir, fmt.Sprintf("m%02d/p%02d/d%d/f%05d.go", i%20, i/20%25, i/500%4, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSearch20k compares search through the channel with ripgrep
// run in the same neuron through the same channel.
func BenchmarkSearch20k(b *testing.B) {
	p := newPair(b)
	tree := filepath.Join(p.root, "tree")
	searchBenchTree(b, tree)
	ctx := context.Background()
	const pattern = `quux\w+ marker`
	b.Run("cortex", func(b *testing.B) {
		args := &protocol.SearchArgs{Path: "tree", Pattern: pattern, MaxResults: protocol.MaxSearchResults}
		for b.Loop() {
			res, err := p.client.Search(ctx, args)
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Matches) != 200 || res.FilesScanned != 20000 {
				b.Fatalf("%d matches in %d files", len(res.Matches), res.FilesScanned)
			}
		}
	})
	b.Run("rg", func(b *testing.B) {
		rg, err := exec.LookPath("rg")
		if err != nil {
			b.Skip("rg (ripgrep) is not installed: nothing to compare with")
		}
		req := &link.ExecRequest{Command: protocol.Command{Argv: []string{rg, "-n", pattern, tree}}}
		for b.Loop() {
			res, err := p.client.Exec(ctx, req)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%v %+v %s", err, res, res.Stderr)
			}
			if n := bytes.Count(res.Stdout, []byte("\n")); n != 200 {
				b.Fatalf("rg found %d lines", n)
			}
		}
	})
}
