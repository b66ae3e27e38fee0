package main_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// diff as a user reads it: a fork against its parent, with a patch; a
// neuron against a snapshot of its own; -o json.
func TestDiffCommand(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "base")
	c.ok("exec", "base", "--", "sh", "-c", "printf 'one\\ntwo\\n' > notes.txt && echo x > gone.txt")
	c.ok("fork", "base", "try")
	c.ok("exec", "try", "--", "sh", "-c", "printf 'one\\n2\\n' > notes.txt && rm gone.txt && echo n > added.txt")
	out := c.ok("diff", "try", "--patch")
	for _, want := range []string{"A  ", "/workspace/added.txt  (2 bytes)", "D  ", "/workspace/gone.txt", "M  ", "/workspace/notes.txt  (8 -> 6 bytes)", "-two\n+2\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("diff --patch lacks %q:\n%s", want, out)
		}
	}
	var d struct {
		Against string
		Changes []struct{ Path, Kind string }
	}
	if err := json.Unmarshal([]byte(c.ok("diff", "try", "base", "-o", "json")), &d); err != nil || d.Against != "base" || len(d.Changes) != 3 {
		t.Fatalf("diff -o json: %+v %v", d, err)
	}
	c.ok("snapshot", "create", "try", "s1")
	c.ok("exec", "try", "--", "sh", "-c", "echo later > later.txt")
	if out := c.ok("diff", "try", "@s1"); !strings.Contains(out, "A  ") || !strings.Contains(out, "later.txt") || strings.Contains(out, "notes.txt") {
		t.Fatalf("diff against a snapshot:\n%s", out)
	}
	c.fails("was not forked", "diff", "base")
	c.fails("snapshot", "diff", "try", "@")
}
