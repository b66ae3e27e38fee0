package main_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// nsys-cortex snapshot create, list, restore and rm on a process-mode
// neuron, each its own process.
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

	// Snapshots outlive a wipe: listed and removed still, by the full id;
	// a restore needs the neuron.
	c.ok("snapshot", "create", "sn", "w1")
	c.ok("destroy", "--wipe", "sn")
	if out := c.ok("snapshot", "list", "sn", "-o", "name"); out != "w1\n" {
		t.Fatalf("list after a wipe: %q", out)
	}
	if _, errs, code := c.run("", "snapshot", "restore", "sn", "w1"); code != 125 || !strings.Contains(errs, "not found") {
		t.Fatalf("restore after a wipe: %d %q", code, errs)
	}
	if out := c.ok("snapshot", "rm", "sn", "w1"); out != "w1\n" {
		t.Fatalf("rm after a wipe: %q", out)
	}
	if _, errs, code := c.run("", "snapshot", "list", "never"); code != 125 || !strings.Contains(errs, "not found") {
		t.Fatalf("list of a neuron that never was: %d %q", code, errs)
	}
}

// nsys-cortex --api URL snapshot ...: the same commands through a real
// daemon, with the same output; what the daemon saved lists the same
// locally once it is gone.
func TestSnapshotCommandThroughServe(t *testing.T) {
	c := newCLI(t, "process")
	url, stop := c.serve(t)
	api := func(args ...string) []string { return append([]string{"--api", url}, args...) }

	c.ok(api("create", "rs")...)
	c.ok(api("exec", "rs", "--", "sh", "-c", "echo original > keep.txt")...)
	out, errs, code := c.run("", api("snapshot", "create", "rs", "s1")...)
	if code != 0 || out != "s1\n" || !strings.Contains(errs, "snapshot s1 of rs:") || !strings.Contains(errs, "files") {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	if _, errs, code := c.run("", api("snapshot", "create", "rs", "s1")...); code != 125 || !strings.Contains(errs, "exists") {
		t.Fatalf("create again: %d %q", code, errs)
	}
	if _, errs, code := c.run("", api("snapshot", "create", "rs", "../x")...); code != 125 || !strings.Contains(errs, "snapshot name") {
		t.Fatalf("a bad name: %d %q", code, errs)
	}
	remoteJSON := c.ok(api("snapshot", "list", "rs", "-o", "json")...)
	var list []map[string]any
	if err := json.Unmarshal([]byte(remoteJSON), &list); err != nil || len(list) != 1 ||
		list[0]["name"] != "s1" || list[0]["kind"] != "files" || list[0]["neuron"] != "rs" || list[0]["files"].(float64) < 1 {
		t.Fatalf("list -o json: %v %v", list, err)
	}
	if out := c.ok(api("snapshot", "list", "rs")...); !strings.Contains(out, "NAME") || !strings.Contains(out, "s1") || !strings.Contains(out, "files") {
		t.Fatalf("list: %q", out)
	}
	// NSYS_CORTEX_API_URL does what --api does.
	c.env = append(c.env, "NSYS_CORTEX_API_URL="+url)
	if out := c.ok("snapshot", "list", "rs", "-o", "name"); out != "s1\n" {
		t.Fatalf("list through NSYS_CORTEX_API_URL: %q", out)
	}
	c.env = c.env[:len(c.env)-1]

	c.ok(api("exec", "rs", "--", "sh", "-c", "echo changed > keep.txt; echo new > added.txt")...)
	out, errs, code = c.run("", api("snapshot", "restore", "rs", "s1")...)
	if code != 0 || out != "s1\n" || !strings.Contains(errs, "restarted") {
		t.Fatalf("restore: %d %q %q", code, out, errs)
	}
	if out := c.ok(api("exec", "rs", "cat", "keep.txt")...); out != "original\n" {
		t.Fatalf("keep.txt after restore: %q", out)
	}
	if _, _, code := c.run("", api("exec", "rs", "test", "-e", "added.txt")...); code != 1 {
		t.Fatalf("a file added after the snapshot survived the restore (test -e: %d)", code)
	}
	if _, errs, code := c.run("", api("snapshot", "restore", "rs", "nope")...); code != 125 || !strings.Contains(errs, "no such snapshot") {
		t.Fatalf("restore of an unknown snapshot: %d %q", code, errs)
	}
	// A generated id: found by a unique prefix to save, never to restore.
	gen := strings.TrimSpace(c.ok(api("create")...))
	if out := c.ok(api("snapshot", "create", gen[:5], "g1")...); out != "g1\n" {
		t.Fatalf("create by prefix: %q", out)
	}
	if _, errs, code := c.run("", api("snapshot", "restore", gen[:5], "g1")...); code != 125 || !strings.Contains(errs, "NOT_FOUND") {
		t.Fatalf("restore by a prefix (it takes the full id): %d %q", code, errs)
	}
	if out := c.ok(api("snapshot", "restore", gen, "g1")...); out != "g1\n" {
		t.Fatalf("restore by the full id: %q", out)
	}
	c.ok(api("snapshot", "create", "rs", "s2")...)
	if out, errs, code := c.run("", api("snapshot", "rm", "rs", "s2", "gone")...); code != 125 || out != "s2\n" || !strings.Contains(errs, "no such snapshot") {
		t.Fatalf("rm of one there and one not: %d %q %q", code, out, errs)
	}

	// Snapshots outlive a wipe: the daemon lists and deletes them still.
	c.ok(api("snapshot", "create", gen, "w1")...)
	c.ok(api("destroy", "--wipe", gen)...)
	if out := c.ok(api("snapshot", "list", gen, "-o", "name")...); out != "g1\nw1\n" {
		t.Fatalf("list after a wipe: %q", out)
	}
	if out := c.ok(api("snapshot", "rm", gen, "g1", "w1")...); out != "g1\nw1\n" {
		t.Fatalf("rm after a wipe: %q", out)
	}
	if _, errs, code := c.run("", api("snapshot", "list", "never")...); code != 125 || !strings.Contains(errs, "NOT_FOUND") {
		t.Fatalf("list of a neuron that never was: %d %q", code, errs)
	}

	// The daemon gone, the same snapshots list the same way locally.
	if _, code := stop(); code != 0 {
		t.Fatalf("serve did not stop cleanly: %d", code)
	}
	if local := c.ok("snapshot", "list", "rs", "-o", "json"); local != remoteJSON {
		t.Fatalf("list -o json locally:\n%s\nthrough the daemon:\n%s", local, remoteJSON)
	}
}
