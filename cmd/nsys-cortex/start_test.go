package main_test

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// The light program's start budget (docs/decisions.md, "One file, two
// programs"). Package initialisation is held by what it allocates, the
// same on every machine: at most initAllocBudget allocations and
// initByteBudget bytes in all (the full program makes ~100,000). The CPU
// used before main is held only loosely against a Go program that does
// nothing, measured interleaved with it: on the machines CI runs on that
// floor alone costs 5-9 ms, most of it page faults, so a budget in
// milliseconds holds on one machine and fails on the next.
const (
	initAllocBudget = 1500
	initByteBudget  = 256 << 10
	startCPURatio   = 4
)

// splitBinary returns the nsys-cortex users get: NSYS_CORTEX_SPLIT_DIR's
// (scripts/test.sh builds it once), or one built here by scripts/build.sh.
func splitBinary(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("NSYS_CORTEX_SPLIT_DIR"); dir != "" {
		return filepath.Join(dir, "nsys-cortex")
	}
	dir := t.TempDir()
	cmd := exec.Command("scripts/build.sh", dir)
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, out)
	}
	return filepath.Join(dir, "nsys-cortex")
}

// startFloor builds the floor program (testdata/startfloor).
func startFloor(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "startfloor")
	if out, err := exec.Command("go", "build", "-o", p, "./testdata/startfloor").CombinedOutput(); err != nil {
		t.Fatalf("building the floor: %v\n%s", err, out)
	}
	return p
}

// cpuBeforeMain runs each program n times, in turn, and returns the least
// CPU any run of each used before main, as the program says with
// NSYS_CORTEX_DEBUG_START=1. The least, because CPU time grows with what
// else the machine does (its caches), never shrinks; in turn, so that a
// change in that load weighs on both alike.
func cpuBeforeMain(t testing.TB, n int, progs ...[]string) []time.Duration {
	t.Helper()
	least := make([]time.Duration, len(progs))
	for range n {
		for i, argv := range progs {
			stderr := runDebugStart(t, argv, "NSYS_CORTEX_DEBUG_START=1")
			_, rest, ok := strings.Cut(stderr, "cpu before main: ")
			us, err := strconv.Atoi(strings.TrimSuffix(strings.Fields(rest + " x")[0], "us"))
			if !ok || err != nil {
				t.Fatalf("%v says no CPU before main: %q", argv, stderr)
			}
			if d := time.Duration(us) * time.Microsecond; least[i] == 0 || d < least[i] {
				least[i] = d
			}
		}
	}
	return least
}

// runDebugStart runs argv with env added and returns its standard error.
func runDebugStart(t testing.TB, argv []string, env ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, stderr.String())
	}
	return stderr.String()
}

// packageInit is one package's initialisation, as GODEBUG=inittrace=1
// prints it.
type packageInit struct {
	pkg           string
	bytes, allocs int
}

// initTrace runs argv with GODEBUG=inittrace=1 and returns what each
// package's initialisation allocated.
func initTrace(t testing.TB, argv ...string) []packageInit {
	t.Helper()
	var inits []packageInit
	for line := range strings.Lines(runDebugStart(t, argv, "GODEBUG=inittrace=1")) {
		// init PKG @0.5 ms, 0.01 ms clock, 64 bytes, 2 allocs
		var in packageInit
		var at, clock float64
		if _, err := fmt.Sscanf(line, "init %s @%f ms, %f ms clock, %d bytes, %d allocs", &in.pkg, &at, &clock, &in.bytes, &in.allocs); err == nil {
			inits = append(inits, in)
		}
	}
	if len(inits) == 0 {
		t.Fatalf("%v printed no init trace", argv)
	}
	return inits
}

// TestStartIsLight: `nsys-cortex version` as built for users initialises
// its packages within initAllocBudget and initByteBudget, and uses at most
// startCPURatio times the CPU before main of a Go program that does
// nothing; the commands the light program leaves to the full one run it,
// with their own help and exit status.
func TestStartIsLight(t *testing.T) {
	bin, floor := splitBinary(t), startFloor(t)
	inits := initTrace(t, bin, "version")
	var size, allocs int
	for _, in := range inits {
		size, allocs = size+in.bytes, allocs+in.allocs
	}
	slices.SortFunc(inits, func(a, b packageInit) int { return cmp.Compare(b.allocs, a.allocs) })
	top := inits[:min(5, len(inits))]
	t.Logf("package initialisation: %d packages, %d allocations, %d bytes; most: %v", len(inits), allocs, size, top)
	if allocs > initAllocBudget || size > initByteBudget {
		t.Errorf("nsys-cortex's packages allocate %d times, %d bytes, at initialisation (budget %d, %d): a package it links initialises too much; most: %v",
			allocs, size, initAllocBudget, initByteBudget, top)
	}
	cpu := cpuBeforeMain(t, 15, []string{bin, "version"}, []string{floor})
	t.Logf("CPU before main: nsys-cortex version %s, a Go program that does nothing %s (%.2fx)", cpu[0], cpu[1], float64(cpu[0])/float64(cpu[1]))
	if cpu[0] > startCPURatio*cpu[1] {
		t.Errorf("nsys-cortex uses %s of CPU before main, more than %d times a Go program that does nothing (%s)", cpu[0], startCPURatio, cpu[1])
	}

	home := t.TempDir()
	run := func(want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "NSYS_CORTEX_HOME="+home)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("nsys-cortex %v: exit %d, want %d\n%s", args, code, want, out)
		}
		return string(out)
	}
	if out := run(0, "policy", "explain", "--help"); !strings.Contains(out, "explain decides one tool call") {
		t.Errorf("policy explain --help through the full program:\n%s", out)
	}
	if out := run(0, "help", "mcp"); !strings.Contains(out, "mcp serves the neuron's tool kit") {
		t.Errorf("help mcp through the full program:\n%s", out)
	}
	if out := run(0, "help", "snapshot", "create"); !strings.Contains(out, "snapshot create") || strings.Contains(out, "Available Commands") {
		t.Errorf("help of a full program's subcommand:\n%s", out)
	}
	if out := run(0, "__complete", "snapshot", ""); !strings.Contains(out, "create") || !strings.Contains(out, "restore") {
		t.Errorf("completion of a full program's command:\n%s", out)
	}
	if out := run(0, "--help"); !strings.Contains(out, "Serve the tool kit of a neuron over MCP") || !strings.Contains(out, "Run a command in a neuron") {
		t.Errorf("the light program's list of commands:\n%s", out)
	}
	if out := run(125, "policy", "explain", "--policy", "nonsense", "--tool", "bash", "--input", `{"command":"ls"}`); !strings.Contains(out, "nonsense") {
		t.Errorf("a bad preset through the full program:\n%s", out)
	}
	unpacked, _ := filepath.Glob(filepath.Join(home, "bin", "nsys-cortex-full-*"))
	if len(unpacked) != 1 {
		t.Errorf("the full program unpacked into the home: %v", unpacked)
	}
	// Unpacked once: a second program beside it would be a second unpack.
	run(0, "tools", "list")
	if again, _ := filepath.Glob(filepath.Join(home, "bin", "nsys-cortex-full-*")); !slices.Equal(again, unpacked) {
		t.Errorf("unpacked again: %v, then %v", unpacked, again)
	}
	// export and import run the full program: the light one links no
	// compression.
	t.Setenv("NSYS_CORTEX_ALLOW_INSECURE_DEV", "1")
	run(0, "create", "--mode", "process", "ex")
	run(0, "exec", "ex", "--", "sh", "-c", "echo kept > f")
	archive := filepath.Join(t.TempDir(), "ex.tar.zst")
	run(0, "export", "ex", "-o", archive)
	if out := run(0, "import", archive, "--id", "ex2"); !strings.Contains(out, "ex2") {
		t.Errorf("import through the full program:\n%s", out)
	}
	run(0, "create", "--mode", "process", "ex2")
	if out := run(0, "exec", "ex2", "--", "cat", "f"); out != "kept\n" {
		t.Errorf("the imported neuron's file: %q", out)
	}
	run(0, "destroy", "--wipe", "ex", "ex2")
}

// BenchmarkCLI times whole nsys-cortex processes as a script runs them
// (spawned and reaped, the build users get), interleaved with the floors
// measured in the same run: /bin/true (fork+exec) and a Go program that
// does nothing. For each mode: `version`, `exec ID -- /bin/true`, and
// `list` with 100 neurons. Reported as p50 milliseconds and ratios to
// /bin/true.
func BenchmarkCLI(b *testing.B) {
	bin, floor := splitBinary(b), startFloor(b)
	for _, mode := range []string{"process", "nsbox"} {
		b.Run(mode, func(b *testing.B) { benchCLI(b, bin, floor, mode, false) })
	}
}

// BenchmarkCLICopy times `cp` of 64 MiB into a neuron and out of it, each
// a whole process, interleaved with dd copying the same file on the host
// (1 MiB blocks) and /bin/true. Apart from BenchmarkCLI, so that the
// copies' writeback does not weigh on its small commands.
func BenchmarkCLICopy(b *testing.B) {
	bin, floor := splitBinary(b), startFloor(b)
	for _, mode := range []string{"process", "nsbox"} {
		b.Run(mode, func(b *testing.B) { benchCLI(b, bin, floor, mode, true) })
	}
}

func benchCLI(b *testing.B, bin, floor, mode string, copies bool) {
	env := append(os.Environ(), "NSYS_CORTEX_HOME="+b.TempDir(), "NSYS_CORTEX_MODE="+mode, "NSYS_CORTEX_ALLOW_INSECURE_DEV=1")
	run := func(args ...string) time.Duration {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t0)
		if err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
		return d
	}
	neurons := 100
	if copies {
		neurons = 1 // list is not run
	}
	b.Cleanup(func() {
		for i := range neurons {
			cmd := exec.Command(bin, "destroy", "--wipe", fmt.Sprintf("b%03d", i))
			cmd.Env = env
			cmd.Run()
		}
	})
	create := exec.Command(bin, "create", "b000")
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		b.Skipf("%s mode: %v\n%s", mode, err, out)
	}
	for i := 1; i < neurons; i++ {
		run(bin, "create", fmt.Sprintf("b%03d", i))
	}
	// 64 MiB in and out with cp, the process start included.
	const cpSize = 64 << 20
	in, out := filepath.Join(b.TempDir(), "in"), filepath.Join(b.TempDir(), "out")
	if err := os.WriteFile(in, bytes.Repeat([]byte("0123456789abcdef"), cpSize/16), 0o644); err != nil {
		b.Fatal(err)
	}
	names := []string{"true", "go-floor", "version", "exec", "list"}
	cmds := [][]string{{"/bin/true"}, {floor}, {bin, "version"}, {bin, "exec", "b000", "--", "/bin/true"}, {bin, "list"}}
	if copies {
		// cp-in and cp-out replace the file the iteration before made (an
		// atomic replace: on ext4 the rename starts the writeback of a
		// file whose blocks were not allocated ahead, link.reserve);
		// cp-out-new and cp-in-new make a file that was not
		// there (cp-out-new's is removed once timed). The order is
		// part of the figures: whatever comes after a copy pays for its
		// writeback, and a sync between them (as Suite/File64M has) made
		// cp-out slower, not steadier, on this VM.
		names = []string{"true", "cp-in", "cp-out", "cp-out-new", "cp-dd", "cp-in-new"}
		cmds = [][]string{{"/bin/true"}, {bin, "cp", in, "b000:big"}, {bin, "cp", "b000:big", out}, {bin, "cp", "b000:big", out + "-new-%d"},
			{"dd", "if=" + in, "of=" + out + ".dd", "bs=1M", "status=none"}, {bin, "cp", in, "b000:new-%d"}}
	}
	times := make([][]time.Duration, len(cmds))
	b.ResetTimer()
	for it := range b.N {
		for i, c := range cmds {
			if n := len(c) - 1; strings.HasSuffix(c[n], "%d") {
				c = append(slices.Clip(c[:n]), fmt.Sprintf(c[n], it))
			}
			times[i] = append(times[i], run(c...))
			if names[i] == "cp-out-new" {
				os.Remove(c[len(c)-1])
			}
		}
	}
	b.StopTimer()
	for i, n := range names {
		b.ReportMetric(p50ms(times[i]), n+"-p50-ms")
		if i > 0 {
			b.ReportMetric(p50ms(times[i])/p50ms(times[0]), n+"/true")
		}
		if copies && i > 0 {
			b.ReportMetric(cpSize/1e6/p50ms(times[i]), n+"-GB/s")
		}
	}
}

// BenchmarkPeers sets `nsys-cortex exec ID -- /bin/true` (an nsbox neuron,
// the whole CLI process) beside what peers take for the same /bin/true,
// each a whole process spawned and reaped, interleaved with the fork+exec
// floor (/bin/true itself): bubblewrap with every namespace unshared,
// `docker exec` into a running container (NSYS_CORTEX_BENCH_IMAGE, or the
// test image), Anthropic's sandbox runtime (`srt`) and OpenAI Codex's
// (`codex sandbox`). A peer not installed here is left out, and said so.
// Reported as p50 milliseconds and ratios to the floor.
func BenchmarkPeers(b *testing.B) {
	bin := splitBinary(b)
	env := append(os.Environ(), "NSYS_CORTEX_HOME="+b.TempDir(), "NSYS_CORTEX_MODE=nsbox")
	create := exec.Command(bin, "create", "peer")
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		b.Skipf("nsbox mode: %v\n%s", err, out)
	}
	b.Cleanup(func() {
		cmd := exec.Command(bin, "destroy", "--wipe", "peer")
		cmd.Env = env
		cmd.Run()
	})
	names := []string{"true", "nsys-cortex-exec"}
	cmds := [][]string{{"/bin/true"}, {bin, "exec", "peer", "--", "/bin/true"}}
	peer := func(name, tool string, args ...string) {
		if _, err := exec.LookPath(tool); err != nil {
			b.Logf("%s: %s is not installed", name, tool)
			return
		}
		if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
			b.Logf("%s does not run here: %v\n%s", name, err, out)
			return
		}
		names, cmds = append(names, name), append(cmds, append([]string{tool}, args...))
	}
	if bw := sandboxtest.BwrapTrue(); bw != nil {
		peer("bwrap", bw.Path, bw.Args[1:]...)
	} else {
		b.Log("bwrap: not installed")
	}
	img := cmp.Or(os.Getenv("NSYS_CORTEX_BENCH_IMAGE"), "nsys-cortex-neuron:test")
	if out, err := exec.Command("docker", "run", "--detach", "--rm", "--network", "none", img, "sleep", "3600").Output(); err == nil {
		id := strings.TrimSpace(string(out))
		b.Cleanup(func() { exec.Command("docker", "rm", "--force", id).Run() })
		peer("docker-exec", "docker", "exec", id, "/bin/true")
	} else {
		b.Logf("docker-exec: no container of %s: %v", img, err)
	}
	peer("srt", "srt", "/bin/true")
	peer("codex-sandbox", "codex", "sandbox", "/bin/true")
	times := make([][]time.Duration, len(cmds))
	b.ResetTimer()
	for range b.N {
		for i, c := range cmds {
			cmd := exec.Command(c[0], c[1:]...)
			cmd.Env = env
			t0 := time.Now()
			out, err := cmd.CombinedOutput()
			times[i] = append(times[i], time.Since(t0))
			if err != nil {
				b.Fatalf("%v: %v\n%s", c, err, out)
			}
		}
	}
	b.StopTimer()
	for i, n := range names {
		b.ReportMetric(p50ms(times[i]), n+"-p50-ms")
		if i > 0 {
			b.ReportMetric(p50ms(times[i])/p50ms(times[0]), n+"/true")
		}
	}
}

// p50ms is the median of ds, in milliseconds.
func p50ms(ds []time.Duration) float64 {
	return float64(sandboxtest.Percentile(ds, 0.5)) / float64(time.Millisecond)
}
