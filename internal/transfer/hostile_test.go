package transfer

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// hostile is a neuron's side of a copy that answers whatever the test
// says: an agent that lies (or the neuron's own code posing as one). Its
// listings are by directory, its files all hold "data".
type hostile struct {
	stat  protocol.FileInfo
	lists map[string][]protocol.FileInfo
}

func (h *hostile) WriteFileFrom(context.Context, string, io.Reader, *link.WriteOptions) (int64, error) {
	return 0, nil
}
func (h *hostile) ReadFileTo(_ context.Context, _ string, w io.Writer) (int64, error) {
	n, err := w.Write([]byte("data"))
	return int64(n), err
}
func (h *hostile) Stat(context.Context, string) (*protocol.FileInfo, error) {
	fi := h.stat
	return &fi, nil
}
func (h *hostile) Lstat(ctx context.Context, p string) (*protocol.FileInfo, error) {
	return h.Stat(ctx, p)
}
func (h *hostile) List(_ context.Context, p string) ([]protocol.FileInfo, error) {
	return h.lists[path.Clean(p)], nil
}
func (h *hostile) Mkdir(context.Context, string) (string, error) { return "", nil }
func (h *hostile) Symlink(context.Context, string, string) error { return nil }
func (h *hostile) Remove(context.Context, string, bool) error    { return nil }
func file(name string, mode uint32) protocol.FileInfo {
	return protocol.FileInfo{Name: name, Type: protocol.TypeFile, Mode: mode}
}
func dir(name string, mode uint32) protocol.FileInfo {
	return protocol.FileInfo{Name: name, Type: protocol.TypeDir, Mode: mode}
}
func symlink(name, target string) protocol.FileInfo {
	return protocol.FileInfo{Name: name, Type: protocol.TypeSymlink, Target: target}
}

const setuid = uint32(fs.ModeSetuid | fs.ModeSetgid | 0o755)

// TestHostileAnswersNeverHarmTheHost drives every answer a lying agent can
// give a copy out of a neuron through the host's writing code: names that
// leave the destination, set-id modes, a name listed as a link and then as
// a directory, a tree too deep. Nothing may be written outside the
// destination, and nothing set-id anywhere.
func TestHostileAnswersNeverHarmTheHost(t *testing.T) {
	cases := map[string]struct {
		lists map[string][]protocol.FileInfo
		fails bool
	}{
		"dot-dot name":   {lists: map[string][]protocol.FileInfo{"src": {file("../escaped", 0o644)}}, fails: true},
		"slash name":     {lists: map[string][]protocol.FileInfo{"src": {file("../x/y", setuid)}}, fails: true},
		"absolute name":  {lists: map[string][]protocol.FileInfo{"src": {file("/tmp/x", 0o644)}}, fails: true},
		"empty name":     {lists: map[string][]protocol.FileInfo{"src": {file("", 0o644)}}, fails: true},
		"dot name":       {lists: map[string][]protocol.FileInfo{"src": {dir(".", 0o755)}}, fails: true},
		"link then dir":  {lists: map[string][]protocol.FileInfo{"src": {symlink("l", "OUTSIDE"), dir("l", 0o755)}, "src/l": {file("authorized_keys", 0o600)}}, fails: true},
		"set-id modes":   {lists: map[string][]protocol.FileInfo{"src": {file("f", setuid), dir("d", setuid)}, "src/d": {file("g", setuid)}}},
		"link as a link": {lists: map[string][]protocol.FileInfo{"src": {symlink("l", "OUTSIDE")}}},
		"unknown type":   {lists: map[string][]protocol.FileInfo{"src": {{Name: "x", Type: "blockdev"}}}, fails: true},
	}
	deep := map[string][]protocol.FileInfo{}
	p := "src"
	for range maxTreeDepth + 2 {
		deep[p] = []protocol.FileInfo{dir("d", 0o755)}
		p += "/d"
	}
	cases["too deep"] = struct {
		lists map[string][]protocol.FileInfo
		fails bool
	}{lists: deep, fails: true}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			top := t.TempDir()
			outside := filepath.Join(top, "outside")
			dst := filepath.Join(top, "inside", "dst")
			os.MkdirAll(outside, 0o755)
			os.MkdirAll(filepath.Dir(dst), 0o755)
			for d, entries := range tc.lists {
				for i := range entries {
					entries[i].Target = strings.ReplaceAll(entries[i].Target, "OUTSIDE", outside)
				}
				tc.lists[d] = entries
			}
			h := &hostile{stat: dir("src", setuid), lists: tc.lists}
			err := Copy(context.Background(), Location{Neuron: "n", Path: "src", Client: h}, Location{Path: dst}, Options{Stderr: io.Discard})
			if tc.fails && err == nil {
				t.Error("the copy accepted the answer")
			}
			if !tc.fails && err != nil {
				t.Errorf("the copy failed: %v", err)
			}
			if names, _ := os.ReadDir(outside); len(names) != 0 {
				t.Errorf("written outside the destination: %v", names)
			}
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if info, err := d.Info(); err == nil && info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|fs.ModeDevice) != 0 {
					t.Errorf("%s has mode %v", p, info.Mode())
				}
				if !strings.HasPrefix(p, filepath.Dir(dst)) && p != top && p != outside && p != filepath.Dir(dst) {
					t.Errorf("%s was made outside the destination", p)
				}
				return nil
			})
		})
	}
}

// A single file's mode comes from the agent's stat: set-id bits never
// reach the host.
func TestHostileStatOfAFile(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "f")
	h := &hostile{stat: file("f", setuid)}
	if err := Copy(context.Background(), Location{Neuron: "n", Path: "f", Client: h}, Location{Path: dst}, Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dst)
	if err != nil || st.Mode() != 0o755 {
		t.Fatalf("mode %v %v, want 0755", st.Mode(), err)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, []byte("data")) {
		t.Fatalf("content %q", b)
	}
}
