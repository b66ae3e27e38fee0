package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/transfer"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// testBoundary tries, in every mode, the attacks an adversarial review
// made on host code that trusted a neuron: the neuron plants symlinks to
// host paths in what the host copies, and swaps files for such links while
// the host reads them. Every attempt must fail, and nothing of the host's
// may be written or read through the neuron's links.
func testBoundary(t *testing.T, f *fixture) {
	m, c := f.running("bound")
	st, err := m.Get(f.ctx, "bound")
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string) {
		t.Helper()
		res, err := c.Exec(f.ctx, &link.ExecRequest{Command: sh(script)})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", script, res, err)
		}
	}
	secret := hostSecret(t)

	t.Run("CopyOutNeverFollowsLinks", func(t *testing.T) {
		outside := t.TempDir() // stands for /root/.ssh
		results := filepath.Join(t.TempDir(), "results")
		os.Mkdir(results, 0o755)
		src := transfer.Location{Neuron: "bound", Path: "out", Client: c}
		dst := transfer.Location{Path: results}
		run("mkdir out && ln -s " + outside + " out/l && echo a > out/a")
		if err := transfer.Copy(f.ctx, src, dst, transfer.Options{Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		run("rm out/l && mkdir out/l && echo KEY > out/l/authorized_keys")
		err := transfer.Copy(f.ctx, src, dst, transfer.Options{Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("the second copy: %v, want the planted link refused", err)
		}
		if names, _ := os.ReadDir(outside); len(names) != 0 {
			t.Fatalf("the copy wrote through the neuron's link into %s: %v", outside, names)
		}
	})

	t.Run("CopyOutTwiceNeverFollowsLinks", func(t *testing.T) {
		// The README's `cp N:out results`, run twice: the first copy makes
		// results, the second goes into results/out — which the neuron made
		// a link, in the first, to what stands for /root/.ssh.
		outside := t.TempDir()
		results := filepath.Join(t.TempDir(), "results")
		src := transfer.Location{Neuron: "bound", Path: "twice", Client: c}
		dst := transfer.Location{Path: results}
		run("mkdir twice && ln -s " + outside + " twice/twice && echo KEY > twice/authorized_keys")
		if err := transfer.Copy(f.ctx, src, dst, transfer.Options{Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		err := transfer.Copy(f.ctx, src, dst, transfer.Options{Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("the second copy: %v, want the link at its destination refused", err)
		}
		if names, _ := os.ReadDir(outside); len(names) != 0 {
			t.Fatalf("the second copy wrote through the neuron's link into %s: %v", outside, names)
		}
		// A file copy onto a link an earlier copy left: refused too.
		err = transfer.Copy(f.ctx, transfer.Location{Neuron: "bound", Path: "twice/authorized_keys", Client: c},
			transfer.Location{Path: filepath.Join(results, "twice")}, transfer.Options{Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("a file copy onto the link: %v, want it refused", err)
		}
		if names, _ := os.ReadDir(outside); len(names) != 0 {
			t.Fatalf("a file copy wrote through the neuron's link into %s: %v", outside, names)
		}
	})

	t.Run("CopyBetweenNeuronsNeverWritesThroughLinks", func(t *testing.T) {
		// A neuron's earlier copy into another leaves a link there to that
		// one's own files; a later copy of a file onto it must replace the
		// link, never write the other neuron's .profile through it.
		_, c2 := f.running("victim")
		run2 := func(script string) string {
			t.Helper()
			res, err := c2.Exec(f.ctx, &link.ExecRequest{Command: sh(script)})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s: %+v %v", script, res, err)
			}
			return string(res.Stdout)
		}
		home := strings.TrimSpace(run2("echo $HOME"))
		run2("echo ORIGINAL > " + home + "/victim-profile")
		run("mkdir plant && ln -s " + home + "/victim-profile plant/t")
		src := transfer.Location{Neuron: "bound", Path: "plant", Client: c}
		if err := transfer.Copy(f.ctx, src, transfer.Location{Neuron: "victim", Path: "x", Client: c2}, transfer.Options{Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		run("rm plant/t && echo PLANTED > plant/t")
		profile := func(when string) {
			t.Helper()
			if got := run2("cat " + home + "/victim-profile"); got != "ORIGINAL\n" {
				t.Fatalf("%s wrote through the planted link: the other neuron's file is %q", when, got)
			}
		}
		// A file copy onto the link, or into the directory that holds it:
		// refused, the link untouched.
		for _, dst := range []string{"x/", "x/t"} {
			err := transfer.Copy(f.ctx, transfer.Location{Neuron: "bound", Path: "plant/t", Client: c},
				transfer.Location{Neuron: "victim", Path: dst, Client: c2}, transfer.Options{Stderr: io.Discard})
			if err == nil || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("a file copy onto %s: %v, want the link refused", dst, err)
			}
			profile("a file copy onto " + dst)
		}
		// The tree again, into x itself: the file replaces the link.
		if err := transfer.Copy(f.ctx, transfer.Location{Neuron: "bound", Path: "plant/.", Client: c},
			transfer.Location{Neuron: "victim", Path: "x", Client: c2}, transfer.Options{Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		profile("a tree copy over the link")
		if got := run2("cat x/t && test ! -L x/t && echo file"); got != "PLANTED\nfile\n" {
			t.Fatalf("the tree copy did not replace the link at x/t with the file: %q", got)
		}
	})

	t.Run("HostDescriptorsNeverReachTheNeuron", func(t *testing.T) {
		// The host process holds, without close-on-exec, a root-only file
		// open for reading and another for appending (a shell's `exec
		// 7<secret 8>>file` before `nsys-cortex create`, or a FUSE device a
		// library opened): a neuron it starts must get neither.
		rd, err := os.Open(secret.path)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		appendTo := filepath.Join(t.TempDir(), "appended")
		wr, err := os.OpenFile(appendTo, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer wr.Close()
		for _, f := range []*os.File{rd, wr} {
			fd, err := syscall.Dup(int(f.Fd())) // a dup is not close-on-exec
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
		}
		m2, c2 := f.running("fdleak")
		defer m2.Destroy(f.ctx, "fdleak", sandbox.DestroyOptions{Wipe: true})
		tool := uploadHostile(t, f, c2)
		res, err := c2.Exec(f.ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{tool, "fds"}}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("hostile fds: %+v %v", res, err)
		}
		if bytes.Contains(res.Stdout, []byte(secret.content)) {
			t.Fatalf("a command read the host's root-only file through an inherited descriptor: %q", res.Stdout)
		}
		if b, _ := os.ReadFile(appendTo); len(b) != 0 {
			t.Fatalf("a command wrote the host's file through an inherited descriptor: %q", b)
		}
	})

	t.Run("ImpostorIsRefused", func(t *testing.T) {
		// A process of the neuron stops the real agent and answers the
		// host's next connection as if it were the agent.
		tool := uploadHostile(t, f, c)
		dir := f.cfg.ChannelDir
		if dir == "" {
			dir = st.SocketDir // process mode: the neuron sees the host's paths
		}
		if _, err := c.ProcStart(f.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{tool, "impostor", dir, "8"}}}); err != nil {
			t.Fatal(err)
		}
		// Where the agent is PID 1 of its namespace (docker), nothing in
		// the neuron can stop it: the impostor then only races it.
		stopped := waittest.Until(5*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
			defer cancel()
			_, err := c.Health(ctx)
			return err != nil
		})
		t.Logf("the impostor stopped the agent: %v", stopped)
		ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
		defer cancel()
		other, err := f.manager().Connect(ctx, "bound")
		if err == nil {
			res, eerr := other.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"id"}}})
			if eerr == nil && strings.Contains(string(res.Stdout), "forged-by-the-impostor") {
				t.Fatalf("a new host connection took the impostor's forged answer: %q", res.Stdout)
			}
			if stopped {
				t.Fatalf("a new host connection was answered while the agent was stopped: %+v %v", res, eerr)
			}
		} else if !strings.Contains(err.Error(), "posing as its agent") && !droppedInGuest(f, m, "bound") {
			// Either the host refused the impostor's hello, or (a VM) the
			// guest's PID 1 never let it reach the host at all.
			t.Errorf("the impostor was neither refused by the host nor dropped by the guest: %v", err)
		}
		waittest.For(t, 30*time.Second, "the agent to go on", func() bool {
			ctx, cancel := context.WithTimeout(f.ctx, time.Second)
			defer cancel()
			_, err := c.Health(ctx)
			return err == nil
		})
	})

	t.Run("SnapshotNeverReadsThroughLinks", func(t *testing.T) {
		if f.cfg.OwnKernel {
			t.Skip("a VM neuron's snapshot is its VMM's (memory and disk image), not a copy of its files by the host")
		}
		// Files are swapped, as fast as the neuron can, with links to a
		// root-only host file; the host snapshots meanwhile.
		tool := uploadHostile(t, f, c)
		run("mkdir -p swaps")
		p, err := c.ProcStart(f.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{tool, "swap", "swaps", secret.path, "50"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.ProcSignal(context.Background(), p.PID, "KILL")
		waittest.For(t, 30*time.Second, "the swaps to start", func() bool {
			fi, err := c.Lstat(f.ctx, "swaps/l49")
			return err == nil && fi.Type != ""
		})
		dir := f.env.Layout.SnapshotsDir(st.ID)
		ok := 0
		for i := range 30 {
			name := "race" + strings.Repeat("x", i%3) + hex.EncodeToString([]byte{byte(i)})
			snap, err := store.CreateSnapshot(dir, name, st.ID, st.OverlayPath)
			if err != nil {
				continue // the copy may give up on an entry that keeps changing
			}
			ok++
			if where := holds(t, filepath.Join(dir, snap.Name), secret.content); where != "" {
				t.Fatalf("snapshot %s holds the host's root-only file, at %s", snap.Name, where)
			}
		}
		t.Logf("%d of 30 snapshots taken during the swaps", ok)
	})
}

// testEscapes runs the escape battery (testdata/escape) inside a neuron:
// reading a host file, the host's loopback and abstract sockets, signals
// and ptrace, mounts, namespaces, modules, bpf, keyctl, perf_event_open,
// userfaultfd, io_uring, vsock, setuid and capabilities, the base root,
// TIOCSTI, device nodes and hard links. Every attempt must be denied but
// those the mode exempts, with why.
func testEscapes(t *testing.T, f *fixture) {
	if f.cfg.Unconfined != "" {
		t.Skip(f.cfg.Unconfined)
	}
	_, c := f.running("esc")
	bin := upload(t, f, c, escapeTool, "escape")
	planted := filepath.Join(ShortTempDir(t), "planted-secret")
	if err := os.WriteFile(planted, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	abstract := "nsys-cortex-test-" + hex.EncodeToString(randomBytes(t, 6))
	aln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer aln.Close()
	for _, l := range []net.Listener{ln, aln} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	host := exec.Command("sleep", "300")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	// $PPID of the shell is the agent.
	script := fmt.Sprintf("%s -file %s -port %d -pid %d -agent $PPID -host-abstract %s", bin, planted, ln.Addr().(*net.TCPAddr).Port, host.Process.Pid, abstract)
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: sh(script)})
	if err != nil {
		t.Fatal(err)
	}
	var results map[string]string
	if err := json.Unmarshal(res.Stdout, &results); err != nil || len(results) < 30 {
		t.Fatalf("the escape program: %v\nstdout %s\nstderr %s", err, res.Stdout, res.Stderr)
	}
	for why := range f.cfg.EscapeExempt {
		if _, ok := results[why]; !ok {
			t.Errorf("exempt attempt %q is not one the program makes", why)
		}
	}
	denied := 0
	for _, attempt := range slices.Sorted(maps.Keys(results)) {
		outcome := results[attempt]
		switch why, exempt := f.cfg.EscapeExempt[attempt]; {
		case exempt:
			t.Logf("%-40s exempt (%s): %s", attempt, why, outcome)
		case !strings.HasPrefix(outcome, "denied"):
			t.Errorf("%s: %s", attempt, outcome)
		default:
			denied++
			t.Logf("%-40s %s", attempt, outcome)
		}
	}
	t.Logf("%d of %d attempts denied, %d exempt", denied, len(results), len(f.cfg.EscapeExempt))
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// testDiskCeiling: the review's neuron with 256 MiB of memory wrote 768
// MiB to the host's disk. A neuron made with a disk ceiling gets ENOSPC
// inside past it and takes no more of the host's disk than its ceiling;
// a mode that cannot enforce one refuses it, never drops it.
func testDiskCeiling(t *testing.T, f *fixture) {
	if f.cfg.NoDiskWrites != "" {
		t.Skip(f.cfg.NoDiskWrites)
	}
	const ceiling = 64 << 20
	m := f.manager()
	opts := f.cfg.Options
	opts.Limits.DiskBytes = ceiling
	st, err := m.Create(f.ctx, "disk", opts)
	var ue *sandbox.UnenforceableError
	if errors.As(err, &ue) {
		if !strings.Contains(err.Error(), "disk") {
			t.Fatalf("the refusal does not say it is the disk ceiling: %v", err)
		}
		t.Skipf("refused, as it must be where it cannot hold: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy == nil || st.Policy.Limits.DiskBytes != ceiling {
		t.Fatalf("the policy in force does not report the ceiling: %+v", st.Policy)
	}
	c, err := m.Connect(f.ctx, "disk")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: sh("dd if=/dev/zero of=big bs=1M count=100; echo rc=$?; rm -f big; echo kept > small && cat small")})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if !strings.Contains(out, "No space left") || !strings.Contains(out, "kept") {
		t.Fatalf("writing 100 MB past a 64 MiB ceiling: %q", out)
	}
	if used := hostUsage(t, st.OverlayPath); used > ceiling+16<<20 {
		t.Fatalf("the neuron takes %d MiB of the host's disk, past its %d MiB ceiling", used>>20, ceiling>>20)
	}
}

// hostUsage is what the files under dir take on the host's disk (the
// blocks allocated), not counting a filesystem mounted inside.
func hostUsage(t *testing.T, dir string) int64 {
	var root syscall.Stat_t
	if err := syscall.Lstat(dir, &root); err != nil {
		t.Fatal(err)
	}
	var total int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		var st syscall.Stat_t
		if err != nil || syscall.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			return filepath.SkipDir
		}
		total += st.Blocks * 512
		return nil
	})
	return total
}

// secretFile is a root-only host file with random content.
type secretFile struct{ path, content string }

func hostSecret(t *testing.T) secretFile {
	t.Helper()
	var b [16]byte
	rand.Read(b[:])
	s := secretFile{path: filepath.Join(t.TempDir(), "secret"), content: "SECRET-" + hex.EncodeToString(b[:])}
	if err := os.WriteFile(s.path, []byte(s.content), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// holds returns the first regular file under dir whose contents contain
// needle ("" if none).
func holds(t *testing.T, dir, needle string) string {
	t.Helper()
	found := ""
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(needle)) {
			found = p
		}
		return nil
	})
	return found
}

// tool builds one of the suite's in-neuron programs (testdata/<name>,
// static) once per test binary; the variable env names a prebuilt one
// instead (the rootless run, whose user cannot build).
func tool(name, env string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		if p := os.Getenv(env); p != "" {
			return p, nil
		}
		dir, err := os.MkdirTemp("", "cx"+name)
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest/testdata/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building the %s tool: %v\n%s", name, err, out)
		}
		return bin, nil
	})
}

var (
	hostileTool = tool("hostile", "NSYS_CORTEX_TEST_HOSTILE")
	escapeTool  = tool("escape", "NSYS_CORTEX_TEST_ESCAPE")
)

// BuildHostile builds the boundary suite's tool for races and impostors
// (testdata/hostile); NSYS_CORTEX_TEST_HOSTILE names a prebuilt one.
func BuildHostile() (string, error) { return hostileTool() }

// BuildEscape builds the escape battery (testdata/escape);
// NSYS_CORTEX_TEST_ESCAPE names a prebuilt one.
func BuildEscape() (string, error) { return escapeTool() }

// uploadHostile puts the hostile tool into the neuron and returns its path
// there.
func uploadHostile(t *testing.T, f *fixture, c *link.Client) string {
	t.Helper()
	return upload(t, f, c, hostileTool, ".hostile")
}

// upload puts a built tool into the neuron's workdir as name.
func upload(t *testing.T, f *fixture, c *link.Client, build func() (string, error), name string) string {
	t.Helper()
	p, err := build()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(f.ctx, name, b, &link.WriteOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	return "./" + name
}

// droppedInGuest reports whether the neuron's log says its PID 1 dropped
// a connection to the channel that did not come from the agent (a VM's
// bridge checks the peer of every socket it places).
func droppedInGuest(f *fixture, m sandbox.Manager, id string) bool {
	lp, ok := m.(sandbox.LogPather)
	if !ok {
		return false
	}
	path, err := lp.LogPath(f.ctx, id)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte("which is not the agent"))
}
