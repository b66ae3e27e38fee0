package main_test

import (
	"strings"
	"testing"
)

// fork as a user runs it: forks with the source's files, shown as forks
// by status, through the CLI and through a daemon alike; an id with data
// is refused and left as it was.
func TestForkCommand(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "base", "--label", "team=a")
	c.ok("exec", "base", "--", "sh", "-c", "echo v1 > state.txt")
	if out := c.ok("fork", "base", "kid"); out != "kid\n" {
		t.Fatalf("fork printed %q", out)
	}
	if got := c.ok("exec", "kid", "--", "cat", "state.txt"); got != "v1\n" {
		t.Fatalf("the fork's state.txt: %q", got)
	}
	if st := c.state("kid"); st["forkedFrom"] != "base" || st["forkedAt"] == nil || st["status"] != "running" {
		t.Fatalf("status of the fork: %v", st)
	}
	if out := c.ok("status", "kid"); !strings.Contains(out, "forked from") || !strings.Contains(out, "base at ") {
		t.Fatalf("status does not say where kid came from:\n%s", out)
	}
	c.ok("exec", "kid", "--", "sh", "-c", "echo v2 > state.txt")
	if got := c.ok("exec", "base", "--", "cat", "state.txt"); got != "v1\n" {
		t.Fatalf("the fork's write reached its source: %q", got)
	}
	c.fails("has data already", "fork", "base", "kid")
	if got := c.ok("exec", "kid", "--", "cat", "state.txt"); got != "v2\n" {
		t.Fatalf("a refused fork changed the neuron in its way: %q", got)
	}
	c.fails("--count", "fork", "base", "many", "--count", "101")
	c.fails("--label", "fork", "base", "bad", "--label", "-=x")

	url, _ := c.serve(t)
	if out := c.ok("--api", url, "fork", "kid", "grand", "--count", "2", "--label", "team=b"); out != "grand-1\ngrand-2\n" {
		t.Fatalf("fork --count through the daemon printed %q", out)
	}
	st := c.state("grand-2")
	if st["forkedFrom"] != "kid" || st["labels"].(map[string]any)["team"] != "b" {
		t.Fatalf("status of a fork made through the daemon: %v", st)
	}
	if got := c.ok("--api", url, "exec", "grand-1", "--", "cat", "state.txt"); got != "v2\n" {
		t.Fatalf("grand-1's state.txt: %q", got)
	}
}
