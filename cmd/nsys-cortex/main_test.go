package main_test

// End-to-end tests of the nsys-cortex binary: every command runs as its own
// process against real agents, as a user's shell would run them.

import (
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"

	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cxbin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	// No embedded agent here: the CLI finds cortex-agent beside itself.
	for _, b := range []string{"nsys-cortex", "cortex-agent"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), "github.com/nsys-cortex/cortex/cmd/"+b)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", b, err, out)
			os.Exit(1)
		}
	}
	// Docker mode runs a small image built from this agent, where a docker
	// daemon answers; without one, docker is just not among the modes.
	home, _ := os.MkdirTemp("", "cximghome")
	build := exec.Command(filepath.Join(dir, "nsys-cortex"), "image", "build", "--test", "--tag", dockerTestImage)
	build.Env = append(os.Environ(), "NSYS_CORTEX_HOME="+home)
	if out, err := build.CombinedOutput(); err != nil && os.Getenv("NSYS_CORTEX_REQUIRE_DOCKER") == "1" {
		fmt.Fprintf(os.Stderr, "building the docker test image: %v\n%s", err, out)
		os.Exit(1)
	}
	os.RemoveAll(home)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dockerTestImage is the image docker mode runs in these tests.
const dockerTestImage = "nsys-cortex-neuron:cli-test"

// cli runs nsys-cortex against one home directory, in one mode.
type cli struct {
	t    *testing.T
	home string
	mode string
	env  []string
}

func newCLI(t *testing.T, mode string) *cli {
	d, err := os.MkdirTemp("", "cx")
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, home: filepath.Join(d, "h"), mode: mode}
	c.env = append(os.Environ(), "NSYS_CORTEX_HOME="+c.home, "NSYS_CORTEX_ALLOW_INSECURE_DEV=1", "NSYS_CORTEX_MODE="+mode, "NSYS_CORTEX_AGENT_BIN=",
		"NSYS_CORTEX_DOCKER_IMAGE="+dockerTestImage, "NSYS_CORTEX_DOCKER_TRANSPORT=unix")
	t.Cleanup(func() {
		out, _, _ := c.run("", "list", "-o", "name")
		for _, id := range strings.Fields(out) {
			c.run("", "destroy", "--wipe", id)
		}
		os.RemoveAll(d)
	})
	return c
}

// modes are the isolation modes this machine runs: nsbox where its
// self-check passes (everywhere in CI), and process.
func modes(t *testing.T) []string {
	c := newCLI(t, "")
	var report struct {
		Modes []struct {
			Mode string `json:"mode"`
			OK   bool   `json:"ok"`
		} `json:"modes"`
	}
	if err := json.Unmarshal([]byte(c.ok("doctor", "--json")), &report); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range report.Modes {
		if m.OK {
			out = append(out, m.Mode)
		}
	}
	if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" && !slices.Contains(out, "nsbox") {
		t.Fatal("nsbox cannot run here")
	}
	if os.Getenv("NSYS_CORTEX_REQUIRE_DOCKER") == "1" && !slices.Contains(out, "docker") {
		t.Fatal("docker mode cannot run here")
	}
	return out
}

// eachMode runs f against every mode this machine runs.
func eachMode(t *testing.T, f func(t *testing.T, c *cli)) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) { f(t, newCLI(t, mode)) })
	}
}

func (c *cli) command(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "nsys-cortex"), args...)
	cmd.Env = c.env
	return cmd
}

// run runs the CLI with stdin and returns stdout, stderr and the exit status.
func (c *cli) run(stdin string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("running %v: %v", args, err)
	}
	// A CLI that hangs fails the test with what it said, instead of
	// holding the test binary until go test's own timeout.
	hung := time.AfterFunc(5*time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	if !hung.Stop() {
		c.t.Fatalf("%v did not finish in 5 minutes; stdout %q, stderr %q", args, out.String(), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("running %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// ok runs the CLI and fails the test unless it exits 0.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("nsys-cortex %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func TestLifecycleAcrossProcesses(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		out, errs, code := c.run("", "create", "demo")
		if code != 0 || out != "demo\n" || strings.Contains(errs, "mode:") {
			t.Fatalf("create: %d %q %q", code, out, errs)
		}
		gen := strings.TrimSpace(c.ok("create"))
		if !regexp.MustCompile(`^n[a-z0-9]{9}$`).MatchString(gen) {
			t.Fatalf("generated id %q", gen)
		}
		var list []map[string]any
		if err := json.Unmarshal([]byte(c.ok("list", "--json")), &list); err != nil || len(list) != 2 {
			t.Fatalf("list: %v %v", list, err)
		}
		for _, st := range list {
			// A docker neuron runs detached: no host process stands for it.
			pid, _ := st["pid"].(float64)
			if st["status"] != "running" || st["mode"] != c.mode || (pid <= 0) != (c.mode == "docker") {
				t.Fatalf("listed state %v", st)
			}
		}
		if name := c.ok("list", "-o", "name"); name != "demo\n"+gen+"\n" && name != gen+"\ndemo\n" {
			t.Fatalf("list -o name: %q", name)
		}
		if out := c.ok("list", "--format", "{{.ID}}={{.Status}}"); !strings.Contains(out, "demo=running") {
			t.Fatalf("--format: %q", out)
		}
		var status map[string]any
		if err := json.Unmarshal([]byte(c.ok("status", "demo", "-o", "json")), &status); err != nil || status["health"] == nil {
			t.Fatalf("status: %v %v", status, err)
		}
		// Again: already running is not an error and prints the id.
		if out, errs, code := c.run("", "create", "demo"); code != 0 || out != "demo\n" || !strings.Contains(errs, "already running") {
			t.Fatalf("create again: %d %q %q", code, out, errs)
		}
		c.ok("exec", "demo", "--", "sh", "-c", "echo persisted > kept.txt")
		c.ok("destroy", "demo")
		if out := c.ok("status", "demo", "--format", "{{.Status}}"); out != "stopped\n" {
			t.Fatalf("after destroy: %q", out)
		}
		if _, errs, code := c.run("", "exec", "demo", "true"); code != 125 || !strings.Contains(errs, "not running") {
			t.Fatalf("exec in a stopped neuron: %d %q", code, errs)
		}
		c.ok("create", "demo")
		if out := c.ok("exec", "demo", "cat", "kept.txt"); out != "persisted\n" {
			t.Fatalf("after recreate: %q", out)
		}
		c.ok("destroy", "--wipe", "demo", gen)
		if _, errs, code := c.run("", "status", "demo"); code != 125 || !strings.Contains(errs, "not found") {
			t.Fatalf("after wipe: %d %q", code, errs)
		}
	})
}

func TestExecPassesThrough(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "ex")
		out, errs, code := c.run("", "exec", "ex", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		if out != "out\n" || errs != "err\n" || code != 3 {
			t.Fatalf("%q %q %d", out, errs, code)
		}
		if _, _, code := c.run("", "exec", "ex", "sh", "-c", "kill -TERM $$"); code != 128+15 {
			t.Fatalf("signal: %d", code)
		}
		if _, errs, code := c.run("", "exec", "ex", "no-such-cmd"); code != 127 || !strings.Contains(errs, "no-such-cmd") {
			t.Fatalf("missing program: %d %q", code, errs)
		}
		if out, _, code := c.run("streamed\ninput\n", "exec", "ex", "--", "sort", "-r"); out != "streamed\ninput\n" || code != 0 {
			t.Fatalf("stdin: %q %d", out, code)
		}
		if c.mode == "process" {
			if _, errs, code := c.run("", "exec", "-w", "/", "ex", "pwd"); code != 125 || !strings.Contains(errs, "PATH_ESCAPE") {
				t.Fatalf("a working directory outside the workdir: %d %q", code, errs)
			}
		} else if out := c.ok("exec", "-w", "/", "ex", "pwd"); out != "/\n" {
			t.Fatalf("-w / in a sandbox: %q", out)
		}
		if out := c.ok("exec", "-e", "A=b c", "ex", "sh", "-c", "echo $A"); out != "b c\n" {
			t.Fatalf("env: %q", out)
		}
		if _, errs, code := c.run("", "exec", "--timeout", "200ms", "ex", "sleep", "30"); code != 124 || !strings.Contains(errs, "--timeout") {
			t.Fatalf("timeout: %d %q", code, errs)
		}
		// -t runs on a PTY even without a terminal of our own.
		if out, _, code := c.run("", "exec", "-t", "ex", "sh", "-c", "tty; exit 4"); code != 4 || !strings.Contains(out, "/dev/pts/") {
			t.Fatalf("-t: %d %q", code, out)
		}
	})
}

func TestInterruptKillsTheRemoteCommand(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "int")
		marker := fmt.Sprintf("%d", 600000+os.Getpid()%100000)
		cmd := c.command("exec", "int", "sh", "-c", "exec sleep "+marker)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running := func() bool { return len(hostProcesses("sleep", marker)) > 0 }
		waittest.For(t, 30*time.Second, "the remote command to start", running)
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Fatalf("interrupted CLI: %v", err)
		}
		if !waittest.Until(30*time.Second, func() bool { return !running() }) {
			t.Fatal("the remote command outlived the interrupted CLI")
		}
	})
}

// hostProcesses lists live host processes whose argv is argv (whatever pid
// namespace they run in).
func hostProcesses(argv ...string) []int {
	want := strings.Join(argv, "\x00")
	return hostProcessesWhere(func(cmdline string) bool { return cmdline == want })
}

// hostProcessesWhere lists live host processes whose argv (NUL-separated)
// matches.
func hostProcessesWhere(match func(cmdline string) bool) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !match(strings.TrimRight(string(b), "\x00")) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !bytes.Contains(st, []byte(") Z ")) {
			out = append(out, pid)
		}
	}
	return out
}

func TestCopy(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "cp")
		local := t.TempDir()
		data := bytes.Repeat([]byte("0123456789"), 1_000_000) // 10 MB: several chunks
		os.WriteFile(filepath.Join(local, "big.bin"), data, 0o640)
		if _, errs, code := c.run("", "cp", filepath.Join(local, "big.bin"), "cp:in/"); code != 125 || !strings.Contains(errs, "does not exist") {
			t.Fatalf("into a missing directory: %d %q", code, errs)
		}
		c.ok("exec", "cp", "mkdir", "in")
		c.ok("cp", filepath.Join(local, "big.bin"), "cp:in/")
		if out := c.ok("exec", "cp", "sh", "-c", "wc -c < in/big.bin; stat -c %a in/big.bin"); out != "10000000\n640\n" {
			t.Fatalf("inside: %q", out)
		}
		c.ok("cp", "cp:in/big.bin", filepath.Join(local, "back.bin"))
		if back, _ := os.ReadFile(filepath.Join(local, "back.bin")); !bytes.Equal(back, data) {
			t.Fatal("copy out differs")
		}
		// An absolute neuron path is the path inside the neuron.
		wd := strings.TrimSpace(c.ok("exec", "cp", "pwd"))
		c.ok("cp", "cp:"+wd+"/in/big.bin", filepath.Join(local, "abs.bin"))
		// Stdin and stdout.
		if _, _, code := c.run("piped", "cp", "-", "cp:piped.txt"); code != 0 {
			t.Fatal("cp -")
		}
		if out := c.ok("cp", "cp:piped.txt", "-"); out != "piped" {
			t.Fatalf("cp to -: %q", out)
		}
		// Trees, both ways, symlinks kept as links.
		os.MkdirAll(filepath.Join(local, "tree/a/b"), 0o755)
		os.WriteFile(filepath.Join(local, "tree/a/b/f"), []byte("deep"), 0o600)
		os.Symlink("b/f", filepath.Join(local, "tree/a/link"))
		c.ok("cp", filepath.Join(local, "tree"), "cp:")
		if out := c.ok("exec", "cp", "sh", "-c", "cat tree/a/b/f; readlink tree/a/link"); out != "deepb/f\n" {
			t.Fatalf("tree in: %q", out)
		}
		c.ok("cp", "cp:tree", filepath.Join(local, "tree2"))
		if b, _ := os.ReadFile(filepath.Join(local, "tree2/a/b/f")); string(b) != "deep" {
			t.Fatalf("tree out: %q", b)
		}
		if target, err := os.Readlink(filepath.Join(local, "tree2/a/link")); err != nil || target != "b/f" {
			t.Fatalf("symlink out: %q %v", target, err)
		}
		// Nothing is created on the host where the destination's directory is missing.
		if _, errs, code := c.run("", "cp", "cp:piped.txt", filepath.Join(local, "no/such/x")); code != 125 || !strings.Contains(errs, "does not exist") {
			t.Fatalf("missing host directory: %d %q", code, errs)
		}
		if _, err := os.Stat(filepath.Join(local, "no")); !os.IsNotExist(err) {
			t.Fatal("cp created directories on the host")
		}
		// A FIFO is not a file: cp says so instead of blocking on it.
		fifo := filepath.Join(local, "fifo")
		syscall.Mkfifo(fifo, 0o600)
		if _, errs, code := c.run("", "cp", fifo, "cp:"); code != 125 || !strings.Contains(errs, "not a regular file") {
			t.Fatalf("fifo: %d %q", code, errs)
		}
		// Leaving the workdir is refused and names the reason.
		if c.mode == "process" {
			if _, errs, code := c.run("", "cp", "cp:../../.neuron.json", filepath.Join(local, "x")); code != 125 || !strings.Contains(errs, "PATH_ESCAPE") {
				t.Fatalf("escape: %d %q", code, errs)
			}
		} else {
			// In a sandbox an absolute path is the neuron's own: its /etc/passwd, not the host's.
			c.ok("cp", "cp:/etc/passwd", filepath.Join(local, "passwd"))
			if b, _ := os.ReadFile(filepath.Join(local, "passwd")); !strings.Contains(string(b), "agent:x:1000") {
				t.Fatalf("the neuron's /etc/passwd: %q", b)
			}
		}
		if _, errs, code := c.run("", "cp", "cp:missing", local); code != 125 || !strings.Contains(errs, "NOT_FOUND") {
			t.Fatalf("missing: %d %q", code, errs)
		}
	})
}

// TestCopyNeverFollowsTheNeuronsLinks is the review's reproduction: a
// neuron plants a symlink to a host directory in a tree that is copied
// out, then turns the link into a directory holding a file, and the tree
// is copied into the same place again. Before, the second copy wrote the
// file through the link, as root, into the host directory.
func TestCopyNeverFollowsTheNeuronsLinks(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "cpx")
		outside := t.TempDir() // stands for /root/.ssh
		results := filepath.Join(t.TempDir(), "results")
		os.Mkdir(results, 0o755)
		c.ok("exec", "cpx", "sh", "-c", "mkdir out && ln -s "+outside+" out/l && echo a > out/a")
		c.ok("cp", "cpx:out", results)
		if target, err := os.Readlink(filepath.Join(results, "out/l")); err != nil || target != outside {
			t.Fatalf("the link is copied as a link: %q %v", target, err)
		}
		c.ok("exec", "cpx", "sh", "-c", "rm out/l && mkdir out/l && echo KEY > out/l/authorized_keys")
		_, errs, code := c.run("", "cp", "cpx:out", results)
		if code != 125 || !strings.Contains(errs, "not a directory") {
			t.Errorf("the second copy: exit %d, %q; want 125 and the link refused", code, errs)
		}
		if names, _ := os.ReadDir(outside); len(names) != 0 {
			t.Fatalf("the copy wrote through the neuron's symlink into %s: %v", outside, names)
		}
		// A file's set-id bits never come out of a neuron.
		c.ok("exec", "cpx", "sh", "-c", "echo x > suid && chmod 4755 suid")
		c.ok("cp", "cpx:suid", filepath.Join(results, "suid"))
		if st, err := os.Stat(filepath.Join(results, "suid")); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || st.Mode().Perm() != 0o755 {
			t.Errorf("the copied file's mode: %v %v", st.Mode(), err)
		}
		// Between neurons, the same: the source's link never leads the
		// copy out of the destination's tree.
		c.ok("create", "cpy")
		c.ok("exec", "cpx", "sh", "-c", "mkdir t && ln -s /home t/l")
		c.ok("exec", "cpy", "mkdir", "in")
		c.ok("cp", "cpx:t", "cpy:in")
		c.ok("exec", "cpx", "sh", "-c", "rm t/l && mkdir t/l && echo planted > t/l/.bashrc")
		if _, errs, code := c.run("", "cp", "cpx:t", "cpy:in"); code != 125 || !strings.Contains(errs, "not a directory") {
			t.Errorf("neuron to neuron through a planted link: exit %d, %q", code, errs)
		}
		if out, _, _ := c.run("", "exec", "cpy", "sh", "-c", "cat /home/.bashrc 2>/dev/null"); strings.Contains(out, "planted") {
			t.Fatal("the source neuron planted a file outside the destination's tree")
		}
	})
}

func TestBackgroundProcesses(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "bg")
		pid := strings.TrimSpace(c.ok("exec", "-d", "bg", "sh", "-c", "echo started; sleep 0.5; echo finished"))
		if _, err := strconv.Atoi(pid); err != nil {
			t.Fatalf("exec -d printed %q", pid)
		}
		// The CLI that started it has exited; another one follows its output.
		if out := c.ok("logs", "-f", "bg", pid); out != "started\nfinished\n" {
			t.Fatalf("logs -f: %q", out)
		}
		if out := c.ok("ps", "bg"); !strings.Contains(out, pid) || !strings.Contains(out, "exited 0") {
			t.Fatalf("ps: %q", out)
		}
		long := strings.TrimSpace(c.ok("exec", "-d", "bg", "sleep", "60"))
		c.ok("kill", "-s", "KILL", "bg", long)
		var procs []map[string]any
		waittest.Until(30*time.Second, func() bool {
			procs = nil
			json.Unmarshal([]byte(c.ok("ps", "bg", "--json")), &procs)
			return len(procs) == 2 && procs[1]["running"] == false
		})
		if len(procs) != 2 || procs[1]["signal"] != "SIGKILL" {
			t.Fatalf("after kill: %v", procs)
		}
	})
}

func TestShellOnARealTerminal(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "sh")
		r := c.onPty(t, 91, 33, "shell", "sh")
		r.tty.Write([]byte("stty size; echo $((40+2)); exit 7\n"))
		if code := r.exit(t); code != 7 {
			t.Fatalf("shell exit %d; output %q", code, r.output())
		}
		if out := r.output(); !strings.Contains(out, "42") || !strings.Contains(out, "33 91") {
			t.Fatalf("shell output: %q", out)
		}
		// Without a terminal, shell says what to do instead.
		if _, errs, code := c.run("", "shell", "sh"); code != 125 || !strings.Contains(errs, "terminal") {
			t.Fatalf("%d %q", code, errs)
		}
	})
}

func TestErrorsAreClear(t *testing.T) {
	c := newCLI(t, "process")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"create", "a/b"}, "contains '/'"},
		{[]string{"create", strings.Repeat("x", 65)}, "limit 64"},
		{[]string{"exec", "nope", "true"}, "not found"},
		{[]string{"create", "--mode", "warp", "x"}, `unknown mode "warp"`},
		{[]string{"list", "-o", "xml"}, "unknown output format"},
		{[]string{"destroy", "ghost"}, "not found"},
		{[]string{"cp", "a", "b"}, "neither side names a neuron"},
	}
	for _, tc := range cases {
		_, errs, code := c.run("", tc.args...)
		if code != 125 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 125 and %q", tc.args, code, errs, tc.want)
		}
	}
	// Without consent, process mode refuses and says why.
	env := []string{}
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, "NSYS_CORTEX_ALLOW_INSECURE_DEV=") {
			env = append(env, kv)
		}
	}
	c.env = env
	if _, errs, code := c.run("", "create", "x"); code != 125 || !strings.Contains(errs, "NSYS_CORTEX_ALLOW_INSECURE_DEV=1") {
		t.Fatalf("%d %q", code, errs)
	}
	if out := c.ok("doctor"); !strings.Contains(out, "process") || !strings.Contains(out, "NSYS_CORTEX_ALLOW_INSECURE_DEV") {
		t.Fatalf("doctor: %q", out)
	}
	if out := c.ok("version"); !strings.Contains(out, "protocol "+protocol.Version()) {
		t.Fatalf("version: %q", out)
	}
}

// An upload cut short (the CLI killed outright) leaves no temporary file
// in the neuron, and the destination untouched.
func TestInterruptedUploadLeavesNothing(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "up")
		c.ok("exec", "up", "sh", "-c", "echo old > big")
		cmd := c.command("cp", "-", "up:big")
		pw, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 1<<20)
		for i := 0; i < 12; i++ { // several chunks reach the neuron
			pw.Write(chunk)
		}
		temporaries := func() string {
			return strings.TrimSpace(c.ok("exec", "up", "sh", "-c", "ls -a | grep -c cortex- || true"))
		}
		waittest.For(t, time.Minute, "the upload to start", func() bool { return temporaries() != "0" })
		cmd.Process.Kill()
		cmd.Wait()
		if !waittest.Until(time.Minute, func() bool { return temporaries() == "0" }) {
			t.Fatalf("temporary file left behind: %q", c.ok("exec", "up", "ls", "-la"))
		}
		if out := c.ok("exec", "up", "cat", "big"); out != "old\n" {
			t.Fatalf("destination changed: %q", out)
		}
	})
}

func TestExecOptions(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "opt")
		// -n: the loop's input is not eaten.
		out, _, code := c.run("a\nb\nc\n", "exec", "-n", "opt", "cat")
		if code != 0 || out != "" {
			t.Fatalf("-n: %q %d", out, code)
		}
		// --timeout is 124, with or without -t.
		if _, errs, code := c.run("", "exec", "--timeout", "300ms", "opt", "sleep", "30"); code != 124 || !strings.Contains(errs, "--timeout") {
			t.Fatalf("timeout: %d %q", code, errs)
		}
		if _, _, code := c.run("", "exec", "-t", "--timeout", "300ms", "opt", "sleep", "30"); code != 124 {
			t.Fatalf("-t timeout: %d", code)
		}
		// A missing program is 127 with a PTY too.
		if _, errs, code := c.run("", "exec", "-t", "opt", "no-such-cmd"); code != 127 || !strings.Contains(errs, "no-such-cmd") {
			t.Fatalf("-t missing: %d %q", code, errs)
		}
		for _, bad := range [][]string{
			{"exec", "-d", "-i", "opt", "cat"}, {"exec", "-d", "--timeout", "1s", "opt", "sleep", "5"},
			{"exec", "--timeout", "-1s", "opt", "true"}, {"exec", "-d", "-t", "opt", "sh"},
		} {
			if _, errs, code := c.run("", bad...); code != 125 || errs == "" {
				t.Errorf("%v: %d %q", bad, code, errs)
			}
		}
		// SIGTERM to the CLI is 143, and the command dies with it.
		marker := fmt.Sprintf("%d", 900000+os.Getpid()%100000)
		running := func() bool { return len(hostProcesses("sleep", marker)) > 0 }
		cmd := c.command("exec", "opt", "sleep", marker)
		cmd.Start()
		waittest.For(t, 30*time.Second, "the remote command to start", running)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err == nil || err.(*exec.ExitError).ExitCode() != 143 {
			t.Fatalf("SIGTERM: %v", err)
		}
		if !waittest.Until(30*time.Second, func() bool { return !running() }) {
			t.Fatal("the remote command outlived the CLI's SIGTERM")
		}
	})
}

// Destroy takes exact ids only: "job1" never means "job10".
// With no mode given, create picks the best one and says which, in one
// short line: the rule and the modes skipped by name, never their whole
// self-checks (doctor prints those).
func TestAutoPicksTheBestMode(t *testing.T) {
	ms := modes(t)
	c := newCLI(t, "")
	out, errs, code := c.run("", "create", "auto1")
	line := regexp.MustCompile(`^mode: ` + ms[0] + ` \(auto: (the best isolating mode whose self-check passes|` +
		`NSYS_CORTEX_ALLOW_INSECURE_DEV=1 allows it and no isolating mode is available)(; skipped [a-z]+(, [a-z]+)*)? — see nsys-cortex doctor\)\n$`)
	if code != 0 || out != "auto1\n" || !line.MatchString(errs) {
		t.Fatalf("%d %q %q (modes here: %v)", code, out, errs, ms)
	}
}

func TestNoPrefixForNames(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "job10")
	if _, errs, code := c.run("", "destroy", "--wipe", "job1"); code != 125 || !strings.Contains(errs, "not found") {
		t.Fatalf("%d %q", code, errs)
	}
	if _, errs, code := c.run("", "exec", "job1", "true"); code != 125 || !strings.Contains(errs, "not found") {
		t.Fatalf("%d %q", code, errs)
	}
	gen := strings.TrimSpace(c.ok("create"))
	if out := c.ok("exec", gen[:5], "echo", "generated ids take prefixes"); out == "" {
		t.Fatal("prefix of a generated id")
	}
}

// --allow means network egress: a mode that can enforce it gives the
// neuron its proxy; one that cannot refuses, naming the policy; a bad entry
// is named.
func TestCreateAllow(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		out, errs, code := c.run("", "create", "--allow", "pypi.org:443", "web")
		if c.mode != "nsbox" { // the modes without an egress proxy
			if code != 125 || !strings.Contains(errs, "cannot enforce network egress") {
				t.Fatalf("process mode with an allow-list: exit %d, %q", code, errs)
			}
			return
		}
		if _, errs, code := c.run("", "create", "--allow", "pypi.org", "--allow", "https://files.example", "bad"); code != 125 ||
			!strings.Contains(errs, `"https://files.example": write a host name`) {
			t.Fatalf("a URL in the allow-list: exit %d, %q", code, errs)
		}
		if code != 0 || out != "web\n" {
			t.Fatalf("create --allow: exit %d, %q %q", code, out, errs)
		}
		if env := c.ok("exec", "web", "--", "sh", "-c", "echo $https_proxy"); env != "http://127.0.0.1:3128\n" {
			t.Fatalf("https_proxy inside: %q", env)
		}
		if list := c.ok("list", "-o", "name"); list != "web\n" {
			t.Fatalf("list after a refused create and a good one: %q", list)
		}
		// The policy is in status; a create that asks for another one while
		// it runs is refused, one that asks for the same is not.
		if st := c.ok("status", "web"); !strings.Contains(st, "network:   egress to pypi.org:443") {
			t.Fatalf("status: %q", st)
		}
		if _, errs, code := c.run("", "create", "--network", "full", "web"); code != 125 || !strings.Contains(errs, "with another network") {
			t.Fatalf("create --network full on a running egress neuron: exit %d, %q", code, errs)
		}
		c.ok("create", "--allow", "pypi.org:443", "web")
		// The proxy's decisions are in the neuron's log.
		c.run("", "exec", "web", "--", "sh", "-c", "curl -s -o /dev/null http://denied.example/ || true")
		if log := c.ok("logs", "web"); !strings.Contains(log, "egress deny GET denied.example:80") {
			t.Fatalf("logs web: %q", log)
		}
	})
}

// A neuron's log holds lines the neuron had a hand in (a VM's console, the
// errors its agent reports): `logs ID` prints them with every control
// character escaped, so none retitles the terminal, writes its clipboard or
// moves the cursor.
func TestNeuronLogIsPrintedClean(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "lg")
	f, err := os.OpenFile(filepath.Join(c.home, "logs", "neurons", "lg.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("guest says \x1b]0;owned\x07 and \x1b]52;c;ZXZpbA==\x07 and \x1b[2J\rcr\n")
	f.Close()
	out := c.ok("logs", "lg")
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("logs printed raw control characters: %q", out)
	}
	if !strings.Contains(out, `guest says \x1b]0;owned\x07`) || !strings.Contains(out, "creating lg") {
		t.Fatalf("logs: %q", out)
	}
}
