package tools_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func TestMain(m *testing.M) {
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

type env = toolstest.Env

func newEnv(t *testing.T, preset string, opts ...tools.Option) *env {
	return toolstest.New(t, preset, opts...)
}

func contains(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("want %q in:\n%s", w, got)
		}
	}
}

func TestInputValidation(t *testing.T) {
	kit, err := tools.New(tools.Detached())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		tool, input, want string
	}{
		{"read", `{}`, `"path" is required`},
		{"read", `{"path":"a","offset":"ten"}`, `"offset" must be a integer`},
		{"read", `{"path":"a","offset":1.5}`, `"offset" must be a whole number`},
		{"read", `{"path":"a","nope":1}`, `"nope" is not a field of this tool; fields: path, offset, limit`},
		{"read", `[1,2]`, `want a JSON object, got an array`},
		{"read", `{"path":`, `not JSON`},
		{"process", `{"action":"explode"}`, `"action" must be one of list, output, input, signal, kill`},
		{"grep", `{"pattern":"x","context":99}`, `"context" must be between 0 and 20`},
		{"bash", `{"command":"true","background":"maybe"}`, `"background" must be a boolean`},
		{"nosuch", `{}`, `no such tool`},
	} {
		t.Run(tc.tool+tc.input, func(t *testing.T) {
			r := kit.Call(ctx, tc.tool, json.RawMessage(tc.input))
			if !r.IsError {
				t.Fatalf("no error: %s", r.Text)
			}
			contains(t, r.Text, tc.want)
		})
	}
}

func TestCoercionRepairsModelArguments(t *testing.T) {
	kit, err := tools.New(tools.Detached())
	if err != nil {
		t.Fatal(err)
	}
	// Explain runs validation and the policy without running the tool.
	for _, in := range []string{
		`{"path":"a.txt","offset":"10","limit":"5"}`,
		`"{\"path\":\"a.txt\"}"`, // the object JSON-encoded once more
	} {
		if _, err := kit.Explain(context.Background(), "read", json.RawMessage(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
	plan, err := kit.Explain(context.Background(), "grep", json.RawMessage(`{"pattern":"x","glob":"*.go","ignore_case":"true"}`))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Explanation.Decision.Effect != policy.Allow {
		t.Fatalf("grep: %+v", plan.Explanation.Decision)
	}
}

func TestFileTools(t *testing.T) {
	e := newEnv(t, "standard")
	// write creates parents.
	contains(t, e.Call("write", map[string]any{"path": "src/deep/a.txt", "content": "one\ntwo\nthree\n"}, false), "created", "3 lines")
	if got := e.Get("src/deep/a.txt"); got != "one\ntwo\nthree\n" {
		t.Fatalf("content %q", got)
	}
	// read numbers lines; offset/limit with a continuation hint.
	contains(t, e.Call("read", map[string]any{"path": "src/deep/a.txt"}, false), "     1\tone", "     3\tthree")
	contains(t, e.Call("read", map[string]any{"path": "src/deep/a.txt", "offset": 2, "limit": 1}, false), "     2\ttwo", "offset=3")
	// edit: unique match, multiple edits atomically, and the refusal after a change behind the agent's back.
	contains(t, e.Call("edit", map[string]any{"path": "src/deep/a.txt", "old_string": "two", "new_string": "TWO"}, false), "1 replacement")
	contains(t, e.Call("edit", map[string]any{"path": "src/deep/a.txt", "edits": []map[string]any{
		{"old_string": "one", "new_string": "ONE"}, {"old_string": "missing", "new_string": "x"}}}, true), "not found")
	if got := e.Get("src/deep/a.txt"); got != "one\nTWO\nthree\n" {
		t.Fatalf("a failed multi-edit changed the file: %q", got)
	}
	e.Put("src/deep/a.txt", "one\nTWO\nthree\nfour\n") // someone else writes it
	contains(t, e.Call("edit", map[string]any{"path": "src/deep/a.txt", "old_string": "one", "new_string": "1"}, true), "changed since you last read it")
	e.Call("read", map[string]any{"path": "src/deep/a.txt"}, false)
	e.Call("edit", map[string]any{"path": "src/deep/a.txt", "old_string": "one", "new_string": "1"}, false)
	// CRLF files stay CRLF.
	e.Put("crlf.txt", "a\r\nb\r\n")
	e.Call("edit", map[string]any{"path": "crlf.txt", "old_string": "a\nb", "new_string": "x\ny"}, false)
	if got := e.Get("crlf.txt"); got != "x\r\ny\r\n" {
		t.Fatalf("crlf: %q", got)
	}
	// Binary files are described, not dumped.
	e.Put("img.png", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	contains(t, e.Call("read", map[string]any{"path": "img.png"}, false), "binary")
	// ls.
	contains(t, e.Call("ls", map[string]any{"path": "src"}, false), "deep/")
	// A directory is not a file.
	contains(t, e.Call("read", map[string]any{"path": "src"}, true), "is a directory")
	contains(t, e.Call("read", map[string]any{"path": "nope.txt"}, true), "NOT_FOUND")
}

func TestApplyPatchAllOrNothing(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("a.py", "def f():\n    return 1\n")
	e.Put("b.py", "x = 1\n")
	bad := "*** Begin Patch\n*** Update File: a.py\n@@\n-    return 1\n+    return 2\n*** Update File: b.py\n@@\n-y = 2\n+y = 3\n*** End Patch\n"
	contains(t, e.Call("apply_patch", map[string]any{"patch": bad}, true), "b.py")
	if e.Get("a.py") != "def f():\n    return 1\n" {
		t.Fatal("a failed patch changed a.py")
	}
	good := "*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    return 1\n+    return 2\n*** Add File: new/c.txt\n+hello\n*** Delete File: b.py\n*** End Patch\n"
	contains(t, e.Call("apply_patch", map[string]any{"patch": good}, false), "a.py", "new/c.txt", "b.py")
	if e.Get("a.py") != "def f():\n    return 2\n" || e.Get("new/c.txt") != "hello\n" {
		t.Fatalf("patch result: %q %q", e.Get("a.py"), e.Get("new/c.txt"))
	}
	if _, err := os.Stat(e.File("b.py")); !os.IsNotExist(err) {
		t.Fatal("b.py not deleted")
	}
}

func TestBash(t *testing.T) {
	e := newEnv(t, "standard")
	contains(t, e.Call("bash", map[string]any{"command": "echo out; echo err >&2; exit 3"}, false), "out", "err", "[exit code 3")
	contains(t, e.Call("bash", map[string]any{"command": "sleep 5", "timeout": 1}, true), "timed out after 1s")
	contains(t, e.Call("bash", map[string]any{"command": "true", "timeout": 601}, true), "over this policy's maximum")
	// Long output keeps head and tail, and the full output is saved in the neuron.
	out := e.Call("bash", map[string]any{"command": "seq 1 100000"}, false)
	contains(t, out, "1\n2\n3\n", "\n100000\n", "characters cut", "the full output is in ")
	if len(out) > 31000 {
		t.Fatalf("output not capped: %d chars", len(out))
	}
	saved := out[strings.Index(out, "the full output is in ")+len("the full output is in "):]
	saved = saved[:strings.Index(saved, ": look")]
	contains(t, e.Call("bash", map[string]any{"command": "wc -l < " + saved}, false), "100000")
	// Background processes: start, read output from an offset, input, kill.
	started := e.Call("bash", map[string]any{"command": "echo ready; cat", "background": true}, false)
	var pid int
	fmt.Sscanf(started, "started pid %d", &pid)
	if pid <= 0 {
		t.Fatalf("no pid in %q", started)
	}
	e.Call("process", map[string]any{"action": "input", "pid": pid, "data": "typed\n"}, false)
	var got string
	waittest.Until(30*time.Second, func() bool {
		got = e.Call("process", map[string]any{"action": "output", "pid": pid}, false)
		return strings.Contains(got, "typed")
	})
	contains(t, got, "ready", "typed", "still running", "next offset=12")
	contains(t, e.Call("process", map[string]any{"action": "output", "pid": pid, "offset": 6}, false), "typed")
	contains(t, e.Call("process", map[string]any{"action": "list"}, false), fmt.Sprintf("pid %d  running", pid))
	contains(t, e.Call("process", map[string]any{"action": "kill", "pid": pid}, false), "stopped")
	contains(t, e.Call("process", map[string]any{"action": "output"}, true), `"pid" is required`)
}

func TestSearchTools(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("pkg/a.go", "package a\nfunc Hello() {}\n")
	e.Put("pkg/b.go", "package a\n// hello again\n")
	e.Put("notes.md", "Hello world\n")
	contains(t, e.Call("grep", map[string]any{"pattern": "Hello", "type": "go"}, false), "pkg/a.go:2:func Hello() {}")
	contains(t, e.Call("grep", map[string]any{"pattern": "hello", "ignore_case": true, "output_mode": "files_with_matches"}, false), "notes.md", "pkg/b.go")
	contains(t, e.Call("grep", map[string]any{"pattern": "nothing-here"}, false), "no matches")
	contains(t, e.Call("find", map[string]any{"pattern": "**/*.go"}, false), "pkg/a.go", "pkg/b.go")
}

func TestPolicyInTheLoop(t *testing.T) {
	e := newEnv(t, "standard")
	// Commands: the denial is a result the model reads, with the rule, and an audit fact.
	out := e.Call("bash", map[string]any{"command": "echo hi && bash -c 'rm -rf /'"}, true)
	contains(t, out, "denied by policy", "rm -rf /")
	if f := e.Audit.Last("tool.decision"); f == nil || f["effect"] != "deny" || f["tool"] != "bash" {
		t.Fatalf("audit: %v", f)
	}
	// Paths are judged resolved: a symlink in the workspace to the home's ssh key is the key.
	// (Process mode's file API is rooted at the workspace, so the key is in it.)
	e.Put("vault/.ssh/id_ed25519", "KEY")
	if err := os.Symlink("vault/.ssh/id_ed25519", e.File("innocent.txt")); err != nil {
		t.Fatal(err)
	}
	contains(t, e.Call("read", map[string]any{"path": "innocent.txt"}, true), "denied by policy", "/.ssh/")
	contains(t, e.Call("read", map[string]any{"path": "vault/x/../.ssh/id_ed25519"}, true), "denied by policy")
	contains(t, e.Call("bash", map[string]any{"command": "cat vault/.ssh/id_ed25519"}, true), "denied by policy") // relative to the workdir
	contains(t, e.Call("bash", map[string]any{"command": "cd vault && cat .ssh/id_ed25519"}, true), "denied by policy")
	contains(t, e.Call("bash", map[string]any{"command": "cat id_ed25519", "cwd": "vault/.ssh"}, true), "denied by policy")
	contains(t, e.Call("bash", map[string]any{"command": "cat innocent.txt"}, false), "KEY") // commands are judged as text, links unresolved: see docs/policy.md
	// Elevation is not granted by standard.
	contains(t, e.Call("elevated", map[string]any{"command": "id", "reason": "test"}, true), "denied by policy")
	// "ask" without an approver is a denial that says so; with one, it runs.
	contains(t, e.Call("bash", map[string]any{"command": "sudo true"}, true), "needs approval")
	approved := newEnv(t, "standard", tools.WithApprover(func(context.Context, *tools.Tool, json.RawMessage, policy.Decision) (bool, error) { return true, nil }))
	approved.Call("bash", map[string]any{"command": "git push --help >/dev/null 2>&1; true"}, false)
}

func TestReadonlyPreset(t *testing.T) {
	e := newEnv(t, "readonly")
	e.Put("a.txt", "x\n")
	e.Call("read", map[string]any{"path": "a.txt"}, false)
	e.Call("bash", map[string]any{"command": "cat a.txt | wc -l"}, false)
	contains(t, e.Call("bash", map[string]any{"command": "echo y > a.txt"}, true), "denied")
	contains(t, e.Call("write", map[string]any{"path": "a.txt", "content": "y"}, true), "denied")
	if e.Get("a.txt") != "x\n" {
		t.Fatal("readonly let a write through")
	}
	for _, tl := range e.Kit.Tools() {
		if tl.Group == tools.GroupFSWrite || tl.Group == tools.GroupElevated {
			t.Errorf("readonly offers %s", tl.Name)
		}
	}
}

// TestSystemPath: under a policy whose allow rules decide (readonly), a
// bare name is the system's program whatever PATH the neuron has, and in
// every policy the kit's shell is the system's bash, never one PATH finds.
func TestSystemPath(t *testing.T) {
	planted := t.TempDir() // process mode: the neuron is the host
	for _, name := range []string{"ls", "bash", "cat"} {
		script := "#!/bin/sh\necho PLANTED-" + name + "\n"
		if err := os.WriteFile(filepath.Join(planted, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	create := sandbox.CreateOptions{Env: []string{"PATH=" + planted + ":/usr/bin:/bin"}}
	ro := toolstest.NewCreated(t, create, "readonly")
	out := ro.Call("bash", map[string]any{"command": `ls / && echo "shell=$BASH" && env | grep ^PATH=`}, false)
	if strings.Contains(out, "PLANTED") {
		t.Fatalf("readonly ran a planted program:\n%s", out)
	}
	contains(t, out, "shell=/", "PATH="+policy.SystemPATH)
	std := toolstest.NewCreated(t, create, "standard")
	out = std.Call("bash", map[string]any{"command": `ls / && echo "shell=$BASH"`}, false)
	contains(t, out, "PLANTED-ls") // standard keeps the neuron's PATH: see docs/policy.md
	if strings.Contains(out, "PLANTED-bash") || !strings.Contains(out, "shell=/usr/bin/bash") && !strings.Contains(out, "shell=/bin/bash") {
		t.Fatalf("standard's shell is not the system's bash:\n%s", out)
	}
}

// TestExplainReadsBash: an explanation without a neuron reads a command as
// the bash that runs it in one: $[x] evaluates x, which a POSIX sh would
// read as text.
func TestExplainReadsBash(t *testing.T) {
	p, err := policy.Preset("readonly")
	if err != nil {
		t.Fatal(err)
	}
	kit, err := tools.New(tools.Detached(), tools.WithPolicy(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{`x='y[$(touch f)]'; echo $[x]`, `echo $[y[$(touch /tmp/p)]]`} {
		in, _ := json.Marshal(map[string]string{"command": cmd})
		plan, err := kit.Explain(context.Background(), "bash", in)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Request.Shell != "bash" || plan.Explanation.Decision.Effect != policy.Deny {
			t.Errorf("%s: read as %q, decided %+v", cmd, plan.Request.Shell, plan.Explanation.Decision)
		}
	}
}

func TestElevatedTrusted(t *testing.T) {
	e := newEnv(t, "trusted")
	contains(t, e.Call("elevated", map[string]any{"command": "echo elevated-ran", "reason": "need it"}, false), "elevated-ran")
	f := e.Audit.Last("tool.elevated")
	if f == nil || f["reason"] != "need it" || f["command"] != "echo elevated-ran" {
		t.Fatalf("elevated audit: %v", f)
	}
	contains(t, e.Call("elevated", map[string]any{"command": "true", "reason": " "}, true), `"reason" is empty`)
}

func TestRedaction(t *testing.T) {
	r := redact.New()
	if err := r.AddSecret("DEPLOY_KEY", "s3cr3t-value-123"); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "standard", tools.WithRedactor(r))
	e.Put("cfg.env", "KEY=s3cr3t-value-123\nGH=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n")
	out := e.Call("bash", map[string]any{"command": "cat cfg.env"}, false)
	if strings.Contains(out, "s3cr3t-value-123") || strings.Contains(out, "ghp_abcdefghij") {
		t.Fatalf("secret leaked: %s", out)
	}
	contains(t, out, "[REDACTED:DEPLOY_KEY]", "[REDACTED:")
	out = e.Call("read", map[string]any{"path": "cfg.env"}, false)
	if strings.Contains(out, "s3cr3t-value-123") {
		t.Fatalf("secret leaked by read: %s", out)
	}
}

// treeHash hashes every file, link and directory mode under root.
func treeHash(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case info.IsDir():
			out[rel] = fmt.Sprintf("dir:%o", info.Mode().Perm())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file:%o:%x:%d", info.Mode().Perm(), sha256.Sum256(b), info.ModTime().UnixNano())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSnapshotRestoresByteForByte(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("keep.txt", "original\n")
	e.Put("dir/data.bin", string(bytes.Repeat([]byte{0, 1, 2, 255}, 50000)))
	if err := os.Symlink("keep.txt", e.File("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.File("keep.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	before := treeHash(t, e.State.Workdir)
	contains(t, e.Call("snapshot", map[string]any{"action": "create", "name": "s1"}, false), `snapshot "s1" created`)
	contains(t, e.Call("snapshot", map[string]any{"action": "create", "name": "s1"}, true), "exists")
	contains(t, e.Call("snapshot", map[string]any{"action": "create", "name": "../x"}, true), "snapshot name")
	// Change everything: edit, delete, add.
	e.Put("keep.txt", "changed\n")
	os.RemoveAll(e.File("dir"))
	e.Put("added.txt", "new\n")
	contains(t, e.Call("snapshot", map[string]any{"action": "list"}, false), "s1")
	contains(t, e.Call("snapshot", map[string]any{"action": "restore", "name": "s1"}, false), "restored")
	after := treeHash(t, e.State.Workdir)
	if len(before) != len(after) {
		t.Fatalf("restore: %d entries, want %d", len(after), len(before))
	}
	var keys []string
	for k := range before {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if before[k] != after[k] {
			t.Errorf("%s: %s, want %s", k, after[k], before[k])
		}
	}
	// The neuron runs again and the tools reconnect.
	contains(t, e.Call("bash", map[string]any{"command": "cat keep.txt"}, false), "original")
	contains(t, e.Call("snapshot", map[string]any{"action": "restore", "name": "nope"}, true), "no such snapshot")
}

func TestNeuronAndMemoryTools(t *testing.T) {
	e := newEnv(t, "standard")
	contains(t, e.Call("neuron", map[string]any{"action": "status"}, false), `"id": "tk1"`, `"status": "running"`)
	contains(t, e.Call("neuron", map[string]any{"action": "health"}, false), `"uptimeMs"`)
	e.Call("bash", map[string]any{"command": "sleep 300", "background": true}, false)
	contains(t, e.Call("neuron", map[string]any{"action": "restart"}, false), "restarted")
	contains(t, e.Call("process", map[string]any{"action": "list"}, false), "no background processes")

	e.Call("memory_update", map[string]any{"key": "project/build", "content": "Build with make; tests need dockerd.", "tags": []string{"build"}}, false)
	e.Call("memory_update", map[string]any{"key": "project/build", "content": "CI runs .ci/run.", "mode": "append"}, false)
	contains(t, e.Call("memory_search", map[string]any{"query": "dockerd"}, false), "project/build")
	contains(t, e.Call("memory_get", map[string]any{"key": "project/build"}, false), "Build with make", "CI runs .ci/run.")
	contains(t, e.Call("memory_search", map[string]any{"query": `"unbalanced AND (`}, false), "")
	e.Call("memory_update", map[string]any{"key": "project/build", "mode": "delete"}, false)
	contains(t, e.Call("memory_get", map[string]any{"key": "project/build"}, true), "project/build")
	contains(t, e.Call("memory_update", map[string]any{"key": "k"}, true), `"content" is required`)
}

// A tool kit's neuron that someone else restarts (or restores) in the same
// process — the API while a chat session holds the neuron — is reached
// again on the next call, not through the closed link of the neuron that
// was replaced.
func TestClientAfterReplacement(t *testing.T) {
	e := newEnv(t, "standard")
	mine := tools.NewSetNeuron(e.Set, e.Layout, e.State.ID)
	before, err := mine.Client(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := before.Health(e.Ctx); err != nil {
		t.Fatal(err)
	}
	if err := tools.NewSetNeuron(e.Set, e.Layout, e.State.ID).Restart(e.Ctx); err != nil {
		t.Fatal(err)
	}
	if !before.Closed() {
		t.Fatal("the client of the replaced neuron does not say its link is closed")
	}
	after, err := mine.Client(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatal("the tool kit kept the client of the neuron that was replaced")
	}
	if _, err := after.Health(e.Ctx); err != nil {
		t.Fatalf("after the neuron was replaced: %v", err)
	}
}
