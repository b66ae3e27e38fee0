package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// export and import as a user runs them: a file, and a pipe; the copy
// starts with its data; a damaged archive is refused naming the entry,
// and leaves nothing.
func TestExportImportCommands(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "orig", "--label", "team=a")
	c.ok("exec", "orig", "--", "sh", "-c", "mkdir -p d/empty && echo kept > d/f.txt && chmod 600 d/f.txt")
	dir := t.TempDir()
	arc := filepath.Join(dir, "orig.tar.zst")
	if out := c.ok("export", "orig", "-o", arc); strings.TrimSpace(out) != arc {
		t.Fatalf("export printed %q", out)
	}
	if out := c.ok("import", arc, "--id", "copy"); out != "copy\n" {
		t.Fatalf("import printed %q", out)
	}
	if st := c.state("copy"); st["status"] != "stopped" || st["labels"].(map[string]any)["team"] != "a" {
		t.Fatalf("the import: %v", st)
	}
	c.ok("create", "copy")
	if got := c.ok("exec", "copy", "--", "sh", "-c", "cat d/f.txt; stat -c %a d/f.txt; ls -d d/empty"); got != "kept\n600\nd/empty\n" {
		t.Fatalf("the imported files: %q", got)
	}
	// A pipe: export - | import -.
	b, err := os.ReadFile(arc)
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, code := c.run("", "export", "orig", "-o", "-")
	if code != 0 || len(stdout) < 100 {
		t.Fatalf("export -o -: exit %d, %d bytes", code, len(stdout))
	}
	if out, errs, code := c.run(stdout, "import", "-", "--id", "piped"); code != 0 || out != "piped\n" {
		t.Fatalf("import -: exit %d %q %q", code, out, errs)
	}
	c.fails("exists", "import", arc, "--id", "copy")
	// Damaged: its tail cut off.
	cut := filepath.Join(dir, "cut.tar.zst")
	os.WriteFile(cut, b[:len(b)/2], 0o600)
	c.fails("damaged", "import", cut, "--id", "cut")
	c.fails("not found", "status", "cut")
}
