package main_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// nsys-cortex snapshot create, list, restore and rm on a process-mode
// neuron, each its own process; --api is refused.
func TestSnapshotCommand(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "sn")
	c.ok("exec", "sn", "--", "sh", "-c", "echo original > keep.txt")
	if out := c.ok("snapshot", "create", "sn", "s1"); out != "s1\n" {
		t.Fatalf("create: %q", out)
	}
	if _, errs, code := c.run("", "snapshot", "create", "sn", "s1"); code != 125 || !strings.Contains(errs, "exists") {
		t.Fatalf("create again: %d %q", code, errs)
	}
	if _, errs, code := c.run("", "snapshot", "create", "sn", "../x"); code != 125 || !strings.Contains(errs, "snapshot name") {
		t.Fatalf("a bad name: %d %q", code, errs)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(c.ok("snapshot", "list", "sn", "-o", "json")), &list); err != nil || len(list) != 1 ||
		list[0]["name"] != "s1" || list[0]["kind"] != "files" || list[0]["neuron"] != "sn" || list[0]["files"].(float64) < 1 {
		t.Fatalf("list -o json: %v %v", list, err)
	}
	if out := c.ok("snapshot", "list", "sn"); !strings.Contains(out, "NAME") || !strings.Contains(out, "s1") || !strings.Contains(out, "files") {
		t.Fatalf("list: %q", out)
	}

	c.ok("exec", "sn", "--", "sh", "-c", "echo changed > keep.txt; echo new > added.txt")
	out, errs, code := c.run("", "snapshot", "restore", "sn", "s1")
	if code != 0 || out != "s1\n" || !strings.Contains(errs, "restarted") {
		t.Fatalf("restore: %d %q %q", code, out, errs)
	}
	if out := c.ok("exec", "sn", "cat", "keep.txt"); out != "original\n" {
		t.Fatalf("keep.txt after restore: %q", out)
	}
	if _, _, code := c.run("", "exec", "sn", "test", "-e", "added.txt"); code != 1 {
		t.Fatalf("a file added after the snapshot survived the restore (test -e: %d)", code)
	}
	if _, errs, code := c.run("", "snapshot", "restore", "sn", "nope"); code != 125 || !strings.Contains(errs, "no such snapshot") {
		t.Fatalf("restore of an unknown snapshot: %d %q", code, errs)
	}

	// A generated id is found by a unique prefix, as by other commands.
	gen := strings.TrimSpace(c.ok("create"))
	if out := c.ok("snapshot", "create", gen[:5], "g1"); out != "g1\n" {
		t.Fatalf("create by prefix: %q", out)
	}
	if out := c.ok("snapshot", "list", gen[:5], "-o", "name"); out != "g1\n" {
		t.Fatalf("list by prefix: %q", out)
	}

	if out := c.ok("snapshot", "rm", "sn", "s1"); out != "s1\n" {
		t.Fatalf("rm: %q", out)
	}
	if out := c.ok("snapshot", "list", "sn", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after rm: %q", out)
	}

	if _, errs, code := c.run("", "--api", "http://127.0.0.1:1", "snapshot", "list", "sn"); code != 125 || !strings.Contains(errs, "without --api") {
		t.Fatalf("with --api: %d %q", code, errs)
	}
}
