package treediff

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		switch {
		case strings.HasPrefix(body, "->"):
			if err := os.Symlink(strings.TrimPrefix(body, "->"), full); err != nil {
				t.Fatal(err)
			}
		case body == "/":
			os.MkdirAll(full, 0o755)
		default:
			if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// What changed from the base to the tree: added, removed, modified
// (contents, kind, link), mode only; equal files are not listed; whole
// trees added or removed list all below; a patch for text.
func TestCompare(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write(t, b, map[string]string{"same.txt": "x\n", "edit.txt": "one\ntwo\n", "gone.txt": "bye\n", "old/x": "1", "link": "->a", "bin": "\x00\x01"})
	write(t, a, map[string]string{"same.txt": "x\n", "edit.txt": "one\n2\n", "new/deep/f": "hi\n", "link": "->b", "bin": "\x00\x02", "chmod.txt": "m"})
	write(t, b, map[string]string{"chmod.txt": "m"})
	os.Chmod(filepath.Join(a, "chmod.txt"), 0o600)
	res, err := Compare(context.Background(), []Layer{{At: "/w", Dir: a, Base: b}}, Options{Patch: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	var order []string
	for _, c := range res.Changes {
		got[c.Path] = c
		order = append(order, c.Kind+" "+c.Path)
	}
	want := "modified /w/bin|mode /w/chmod.txt|modified /w/edit.txt|removed /w/gone.txt|modified /w/link|added /w/new/|added /w/new/deep/|added /w/new/deep/f|removed /w/old/|removed /w/old/x"
	if strings.Join(order, "|") != want {
		t.Fatalf("changes:\n%s\nwant\n%s", strings.Join(order, "|"), want)
	}
	if p := got["/w/edit.txt"].Patch; !strings.Contains(p, "-two\n+2\n") || !strings.Contains(p, "a/w/edit.txt") {
		t.Errorf("patch of edit.txt: %q", p)
	}
	if got["/w/bin"].Patch != "" {
		t.Errorf("a binary file got a patch")
	}
	if c := got["/w/chmod.txt"]; c.Mode != "0600" || c.OldMode != "0644" {
		t.Errorf("mode change: %+v", c)
	}
	if c := got["/w/new/deep/f"]; c.Size != 3 || !strings.Contains(c.Patch, "+hi") {
		t.Errorf("added file: %+v", c)
	}
	res, _ = Compare(context.Background(), []Layer{{At: "/", Dir: a, Base: b}}, Options{Max: 2})
	if len(res.Changes) != 2 || !res.Truncated {
		t.Errorf("Max 2: %d changes, truncated %v", len(res.Changes), res.Truncated)
	}
}

// An overlay whiteout is a deletion over the image.
func TestWhiteouts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a whiteout needs root to make")
	}
	a, b := t.TempDir(), t.TempDir()
	if err := unix.Mknod(filepath.Join(a, "etc-file"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(b, "back"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	res, err := Compare(context.Background(), []Layer{{At: "/", Dir: a, Base: b}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 2 || res.Changes[0].Path != "/back" || res.Changes[0].Kind != Added || res.Changes[1].Kind != Removed {
		t.Fatalf("whiteouts: %+v", res.Changes)
	}
}
