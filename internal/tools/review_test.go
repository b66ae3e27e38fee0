package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Each test here closes a hole an adversarial review found: a model
// controls every input.

func TestPathsThroughMissingDirectoriesAreResolved(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("sec/.ssh/id_rsa", "KEY")
	if err := os.Symlink("sec/.ssh", e.File("lnk")); err != nil {
		t.Fatal(err)
	}
	contains(t, e.Call("read", map[string]any{"path": "lnk/id_rsa"}, true), "denied by policy")
	contains(t, e.Call("read", map[string]any{"path": "nope/../lnk/id_rsa"}, true), "denied by policy")
	contains(t, e.Call("write", map[string]any{"path": "nope/../lnk/authorized_keys", "content": "x"}, true), "denied by policy")
	if _, err := os.Stat(e.File("sec/.ssh/authorized_keys")); err == nil {
		t.Fatal("a write went through the symlink")
	}
}

func TestGrepWithholdsDeniedFiles(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("sec/.ssh/id_rsa", "-----SECRET KEY-----\n")
	e.Put("notes/readme.txt", "no SECRET here\n")
	if err := os.Symlink("../sec/.ssh/id_rsa", e.File("notes/notes.txt")); err != nil {
		t.Fatal(err)
	}
	for _, in := range []map[string]any{
		{"pattern": "SECRET"},
		{"pattern": "SECRET", "hidden": true},
		{"pattern": "SECRET", "hidden": true, "output_mode": "files_with_matches"},
	} {
		out := e.Call("grep", in, false)
		if strings.Contains(out, "SECRET KEY") || strings.Contains(out, "id_rsa") || strings.Contains(out, "notes.txt") {
			t.Fatalf("%v leaked: %s", in, out)
		}
		contains(t, out, "withheld")
	}
	contains(t, e.Call("grep", map[string]any{"pattern": "no SECRET"}, false), "readme.txt")
}

func TestProcessInputIsJudgedAsACommand(t *testing.T) {
	e := newEnv(t, "standard")
	out := e.Call("bash", map[string]any{"command": "sh", "background": true}, false)
	var pid int
	fmt.Sscanf(out, "started pid %d", &pid)
	contains(t, e.Call("process", map[string]any{"action": "input", "pid": pid, "data": "mkfs.ext4 /dev/sda\n"}, true), "denied by policy")
	e.Call("process", map[string]any{"action": "input", "pid": pid, "data": "echo typed\n", "eof": true}, false)
}

func TestRedactionBeforeTheCut(t *testing.T) {
	r := redact.New()
	secret := "s3cr3tVALUEabcdefghijklmnopqrstuvwxyz"
	if err := r.AddSecret("TOKEN", secret); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "standard", tools.WithRedactor(r))
	// Put the secret across where the output is cut (2/3 of the cap).
	pad := strings.Repeat("x", 30000*2/3-210)
	e.Put("out.txt", pad+secret+strings.Repeat("y", 40000))
	out := e.Call("bash", map[string]any{"command": "cat out.txt"}, false)
	for i := 8; i <= len(secret); i++ {
		if strings.Contains(out, secret[:i]) {
			t.Fatalf("%d characters of the secret survived the cut", i)
		}
	}
}

func TestApplyPatchRefusesOneFileNamedTwice(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("a.txt", "one\ntwo\nthree\n")
	p := fmt.Sprintf("*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n*** Update File: %s\n@@\n-three\n+THREE\n*** End Patch\n", e.File("a.txt"))
	contains(t, e.Call("apply_patch", map[string]any{"patch": p}, true), "twice")
	if e.Get("a.txt") != "one\ntwo\nthree\n" {
		t.Fatal("the file changed")
	}
}

func TestConcurrentEditsLoseNothing(t *testing.T) {
	e := newEnv(t, "standard")
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	e.Put("f.txt", strings.Join(lines, "\n")+"\n")
	e.Call("read", map[string]any{"path": "f.txt"}, false)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, _ := json.Marshal(map[string]any{"path": "f.txt", "old_string": fmt.Sprintf("line %d\n", i), "new_string": fmt.Sprintf("LINE %d\n", i)})
			if r := e.Kit.Call(context.Background(), "edit", in); r.IsError {
				t.Error(r.Text)
			}
		}()
	}
	wg.Wait()
	if got := e.Get("f.txt"); strings.Contains(got, "line ") {
		t.Fatalf("lost edits:\n%s", got)
	}
}

func TestWriteNeedsARead(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("existing.txt", "precious\n")
	contains(t, e.Call("write", map[string]any{"path": "existing.txt", "content": "x"}, true), "read it first")
	if e.Get("existing.txt") != "precious\n" {
		t.Fatal("overwritten")
	}
	e.Call("read", map[string]any{"path": "existing.txt"}, false)
	e.Call("write", map[string]any{"path": "existing.txt", "content": "x"}, false)
	e.Call("bash", map[string]any{"command": "mkfifo pipe"}, false)
	contains(t, e.Call("read", map[string]any{"path": "pipe"}, true), "not a regular file")
}

// Pages of a long output, read while it is written and after all of it
// was (many pages' worth waiting: a full page once skipped the rest of
// what the agent sent), join up without a gap.
func TestLongProcessOutputPagesWithoutGaps(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(map[bool]string{false: "while-written", true: "after-written"}[after], func(t *testing.T) {
			pageLongOutput(t, after)
		})
	}
}

func pageLongOutput(t *testing.T, afterWritten bool) {
	e := newEnv(t, "standard")
	out := e.Call("bash", map[string]any{"command": "seq 1 30000; touch seq.done; sleep 60", "background": true}, false)
	var pid int
	fmt.Sscanf(out, "started pid %d", &pid)
	defer e.Call("process", map[string]any{"action": "kill", "pid": pid}, false)
	if afterWritten {
		waittest.For(t, time.Minute, "seq to finish", func() bool { _, err := os.Stat(e.File("seq.done")); return err == nil })
	}
	var all strings.Builder
	offset := 0
	// Page until the last line, however slowly seq writes on a busy machine
	// (a page that brings nothing new waits a little before the next).
	waittest.Until(60*time.Second, func() bool {
		got := e.Call("process", map[string]any{"action": "output", "pid": pid, "offset": offset}, false)
		i := strings.LastIndex(got, "[pid ")
		all.WriteString(strings.TrimSuffix(got[:i], "\n"))
		var next int
		fmt.Sscanf(got[strings.Index(got, "next offset=")+len("next offset="):], "%d", &next)
		offset = next
		return strings.HasSuffix(all.String(), "\n30000\n") || strings.HasSuffix(all.String(), "\n30000")
	})
	want := make([]string, 30000)
	for i := range want {
		want[i] = fmt.Sprint(i + 1)
	}
	if got := strings.Split(strings.TrimSpace(all.String()), "\n"); strings.Join(got, ",") != strings.Join(want, ",") {
		for i := range got {
			if i >= len(want) || got[i] != want[i] {
				t.Logf("first difference at line %d: %q (want %q); around: %q", i, got[i], want[min(i, len(want)-1)], got[max(0, i-2):min(len(got), i+3)])
				break
			}
		}
		t.Fatalf("paged output differs: %d lines, first %q", len(got), got[:min(3, len(got))])
	}
}

func TestElevatedReasonIsCheckedFirst(t *testing.T) {
	e := newEnv(t, "trusted")
	contains(t, e.Call("elevated", map[string]any{"command": "id", "reason": "  "}, true), `"reason" is empty`)
	e.Call("elevated", map[string]any{"command": "true", "reason": "audit me"}, false)
	if f := e.Audit.Last("tool.decision"); f == nil || f["elevationReason"] != "audit me" {
		t.Fatalf("decision fact: %v", f)
	}
}

func TestContentCacheSeesChanges(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("c.txt", "alpha\n")
	e.Call("read", map[string]any{"path": "c.txt"}, false)
	e.Call("edit", map[string]any{"path": "c.txt", "old_string": "alpha", "new_string": "gamma"}, false)
	// Same size, new content, written behind the kit's back: its mtime
	// moves (set a second on, whatever the clock's grain).
	before, err := os.Stat(e.File("c.txt"))
	if err != nil {
		t.Fatal(err)
	}
	e.Put("c.txt", "delta\n")
	if err := os.Chtimes(e.File("c.txt"), time.Time{}, before.ModTime().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	contains(t, e.Call("edit", map[string]any{"path": "c.txt", "old_string": "delta", "new_string": "omega"}, true), "changed since you last read it")
	contains(t, e.Call("read", map[string]any{"path": "c.txt"}, false), "delta")
	e.Call("edit", map[string]any{"path": "c.txt", "old_string": "delta", "new_string": "omega"}, false)
	if e.Get("c.txt") != "omega\n" {
		t.Fatalf("content %q", e.Get("c.txt"))
	}
}

// A page that starts at a line's end keeps that newline: the pages, put
// together, are the output (the notes of an empty page start its text).
func TestOutputPageKeepsItsFirstNewline(t *testing.T) {
	e := newEnv(t, "standard")
	out := e.Call("bash", map[string]any{"command": "printf 'abc\\ndef\\n'; sleep 60", "background": true}, false)
	var pid int
	fmt.Sscanf(out, "started pid %d", &pid)
	defer e.Call("process", map[string]any{"action": "kill", "pid": pid}, false)
	waittest.For(t, 30*time.Second, "the output", func() bool {
		return strings.HasPrefix(e.Call("process", map[string]any{"action": "output", "pid": pid}, false), "abc\ndef\n")
	})
	if got := e.Call("process", map[string]any{"action": "output", "pid": pid, "offset": 3}, false); !strings.HasPrefix(got, "\ndef\n") {
		t.Fatalf("the page from offset 3: %q, want it to start with the newline there", got)
	}
	if got := e.Call("process", map[string]any{"action": "output", "pid": pid, "offset": 8}, false); !strings.HasPrefix(got, "[pid ") {
		t.Fatalf("an empty page: %q, want its notes first", got)
	}
}
