package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/keeper"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// fails runs the CLI and fails the test unless it exits 125 saying want.
func (c *cli) fails(want string, args ...string) {
	c.t.Helper()
	out, errs, code := c.run("", args...)
	if code != 125 || !strings.Contains(errs, want) {
		c.t.Errorf("nsys-cortex %s: exit %d, stdout %q, stderr %q; want 125 and %q", strings.Join(args, " "), code, out, errs, want)
	}
}

// state is what status -o json says of a neuron.
func (c *cli) state(id string) map[string]any {
	c.t.Helper()
	var st map[string]any
	if err := json.Unmarshal([]byte(c.ok("status", id, "-o", "json")), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

func TestLabelsAndSelectors(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "a1", "--label", "team=a", "--label", "run=42")
	c.ok("create", "b1", "--label", "team=b")
	c.ok("create", "c1")
	for sel, want := range map[string]string{
		"team=a": "a1", "team!=a": "b1 c1", "team in (a,b)": "a1 b1", "team notin (a)": "b1 c1", "run": "a1", "!team": "c1", "team=a,run!=42": "",
	} {
		if got := strings.Join(strings.Fields(c.ok("list", "-l", sel, "-o", "name")), " "); got != want {
			t.Errorf("list -l %q: %q, want %q", sel, got, want)
		}
	}
	out := c.ok("label", "a1", "run=43", "owner=me", "team-")
	if out != "a1\n" {
		t.Errorf("label printed %q", out)
	}
	wide := c.ok("list", "-o", "wide", "-l", "owner=me")
	if !strings.Contains(wide, "LABELS") || !strings.Contains(wide, "owner=me,run=43") || strings.Contains(wide, "team") {
		t.Errorf("list -o wide: %q", wide)
	}
	if labels := c.state("a1")["labels"].(map[string]any); labels["run"] != "43" || labels["owner"] != "me" || len(labels) != 2 {
		t.Errorf("status -o json labels: %v", labels)
	}
	if out := c.ok("status", "a1"); !strings.Contains(out, "labels:    owner=me,run=43") {
		t.Errorf("status: %q", out)
	}
	// Labels outlive destroy and create; a create with --label replaces them.
	c.ok("destroy", "a1")
	c.ok("create", "a1")
	if got := c.ok("list", "-l", "owner=me", "-o", "name"); got != "a1\n" {
		t.Errorf("labels after destroy and create: %q", got)
	}
	c.ok("destroy", "a1")
	c.ok("create", "a1", "--label", "fresh=1")
	if got := c.ok("status", "a1", "--format", "{{.Labels}}"); got != "fresh=1\n" {
		t.Errorf("a create with --label: %q", got)
	}
	// Bad input: exit 125, the error names it, nothing changed.
	c.fails(`"-bad"`, "create", "x1", "--label", "-bad=v")
	c.fails(`"v v"`, "create", "x1", "--label", "k=v v")
	c.fails("not found", "label", "ghost", "a=b")
	c.fails(`"Bad_"`, "label", "b1", "Bad_=1")
	c.fails(`"k"`, "label", "b1", "k")
	c.fails("both set and removed", "label", "b1", "k=1", "k-")
	c.fails(`"team in (a"`, "list", "-l", "team in (a")
	c.fails("requires at least 2 arg(s)", "label", "b1")
	if got := c.ok("list", "-o", "name"); got != "a1\nb1\nc1\n" {
		t.Errorf("neurons after the refusals: %q", got)
	}
	if got := c.ok("status", "b1", "--format", "{{.Labels}}"); got != "team=b\n" {
		t.Errorf("b1's labels after the refusals: %q", got)
	}
}

func TestTimeoutCommand(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "t1", "--timeout", "30m", "--on-timeout", "pause", "--auto-pause", "5m")
	st := c.state("t1")
	if st["deadline"] == nil || st["onTimeout"] != "pause" || st["autoPauseNs"] == nil {
		t.Fatalf("after create --timeout: %v", st)
	}
	out := c.ok("status", "t1")
	if !regexp.MustCompile(`deadline:  \S+ \(in (29|30)m, timeout 30m0s\), then pause`).MatchString(out) ||
		!strings.Contains(out, "idle rule: pause after 5m0s idle") {
		t.Errorf("status: %s", out)
	}
	if out := c.ok("list", "-o", "wide"); !strings.Contains(out, "DEADLINE") || !strings.Contains(out, "(pause)") {
		t.Errorf("list -o wide: %q", out)
	}
	out, errs, code := c.run("", "timeout", "t1", "10m", "--on-timeout", "wipe")
	if code != 0 || out != "t1\n" || !strings.Contains(errs, "then wipe") {
		t.Fatalf("timeout 10m: %d %q %q", code, out, errs)
	}
	if st := c.state("t1"); st["onTimeout"] != "wipe" || st["timeoutNs"].(float64) != float64(10*time.Minute) {
		t.Errorf("after timeout 10m: %v", st)
	}
	if _, errs, code := c.run("", "timeout", "t1", "0"); code != 0 || !strings.Contains(errs, "no deadline") {
		t.Fatalf("timeout 0: %d %q", code, errs)
	}
	if st := c.state("t1"); st["deadline"] != nil {
		t.Errorf("after timeout 0: %v", st)
	}
	c.fails(`"abc" is not a duration`, "timeout", "t1", "abc")
	c.fails(`"-5m" is negative`, "timeout", "t1", "--", "-5m")
	c.fails(`"never"`, "timeout", "t1", "5m", "--on-timeout", "never")
	c.fails("needs a deadline", "timeout", "t1", "0", "--on-timeout", "stop")
	c.fails("not found", "timeout", "ghost", "5m")
	c.fails(`--timeout "30" is not a duration`, "create", "x1", "--timeout", "30")
	c.fails(`"explode"`, "create", "x1", "--timeout", "5m", "--on-timeout", "explode")
	c.fails("needs a deadline", "create", "x1", "--on-timeout", "pause")
	c.fails(`--auto-pause "soon"`, "create", "x1", "--auto-pause", "soon")
	if st := c.state("t1"); st["deadline"] != nil {
		t.Errorf("a refused timeout changed the neuron: %v", st)
	}
	c.ok("destroy", "t1")
	c.fails("a deadline is for a running neuron", "timeout", "t1", "5m")
	if got := c.ok("list", "-o", "name"); got != "t1\n" {
		t.Errorf("neurons after the refusals: %q", got)
	}
}

// Pause and resume in every mode: reads leave a paused neuron paused, a
// request (exec) resumes it, and the no-ops say so.
func TestPauseResumeAndExec(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "pz")
		out, errs, code := c.run("", "pause", "pz")
		if code == 125 && strings.Contains(errs, "does not support pause") {
			// A mode without pause refuses it cleanly, the neuron untouched.
			if got := c.ok("status", "pz", "--format", "{{.Status}}"); got != "running\n" {
				t.Fatalf("after a refused pause: %q", got)
			}
			t.Logf("mode %s has no pause, and says so: %s", c.mode, strings.TrimSpace(errs))
			return
		}
		if code != 0 || out != "pz\n" || errs != "" {
			t.Fatalf("pause: %d %q %q", code, out, errs)
		}
		if out, errs, code := c.run("", "pause", "pz"); code != 0 || out != "pz\n" || !strings.Contains(errs, "pz is already paused") {
			t.Fatalf("pause again: %d %q %q", code, out, errs)
		}
		if out := c.ok("status", "pz"); !strings.Contains(out, "status:    paused") || !strings.Contains(out, "paused:    ") {
			t.Errorf("status: %q", out)
		}
		if out := c.ok("list"); !regexp.MustCompile(`pz\s+\S+\s+paused`).MatchString(out) {
			t.Errorf("list: %q", out)
		}
		if out := c.ok("stats", "--no-stream", "pz"); !regexp.MustCompile(`pz\s+paused\s+0\.00%`).MatchString(out) {
			t.Errorf("stats: %q", out)
		}
		if got := c.ok("status", "pz", "--format", "{{.Status}}"); got != "paused\n" {
			t.Fatalf("after the reads: %q", got)
		}
		if out := c.ok("exec", "pz", "--", "echo", "awake"); out != "awake\n" {
			t.Fatalf("exec in a paused neuron: %q", out)
		}
		if got := c.ok("status", "pz", "--format", "{{.Status}}"); got != "running\n" {
			t.Fatalf("after the exec: %q", got)
		}
		if out, errs, code := c.run("", "resume", "pz"); code != 0 || out != "pz\n" || !strings.Contains(errs, "pz is already running") {
			t.Fatalf("resume of a running neuron: %d %q %q", code, out, errs)
		}
		c.ok("pause", "pz")
		c.ok("resume", "pz")
		if got := c.ok("status", "pz", "--format", "{{.Status}}"); got != "running\n" {
			t.Fatalf("after resume: %q", got)
		}
		c.fails("pause --to-disk", "pause", "--to-disk", "pz")
		c.fails("not found", "pause", "ghost")
		c.ok("destroy", "pz")
		c.fails(`neuron "pz" is not running`, "pause", "pz")
		c.fails(`neuron "pz" is not running`, "resume", "pz")
	})
}

// events follows what another process does, and --until ends it.
func TestEventsCommand(t *testing.T) {
	c := newCLI(t, "process")
	follow := c.command("events", "-o", "json")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []map[string]any
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("events -o json printed %q", sc.Text())
				continue
			}
			mu.Lock()
			seen = append(seen, ev)
			mu.Unlock()
		}
	}()
	has := func(typ, neuron string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range seen {
			if ev["type"] == typ && ev["neuron"] == neuron {
				return true
			}
		}
		return false
	}
	// The follower starts at "now": keep making events until it sees one.
	for i := 0; !has("paused", "ev"); i++ {
		if i == 0 {
			c.ok("create", "ev", "--label", "team=a")
		}
		c.ok("pause", "ev")
		c.ok("resume", "ev")
		if i > 100 {
			t.Fatalf("events never saw another process's pause: %v", seen)
		}
	}
	c.ok("destroy", "ev")
	waittest.For(t, 10*time.Second, "the destroyed event", func() bool { return has("destroyed", "ev") })
	follow.Process.Signal(syscall.SIGINT)
	<-read
	if err := follow.Wait(); err == nil || follow.ProcessState.ExitCode() != 130 {
		t.Errorf("events after SIGINT: %v", err)
	}
	mu.Lock()
	for _, ev := range seen {
		if ev["neuron"] == "ev" && (ev["principal"] != "operator" || ev["labels"].(map[string]any)["team"] != "a") {
			t.Errorf("event %v", ev)
		}
	}
	mu.Unlock()

	// The recorded past, and a stream that ends by itself.
	c.ok("create", "ev2", "--label", "team=b")
	out := c.ok("events", "--since", "1h", "--until", "0s", "-l", "team=b")
	if !regexp.MustCompile(`(?m)^\S+ created ev2 \(mode=process, by=operator, labels="team=b"\)\n\S+ started ev2 `).MatchString(out) ||
		strings.Contains(out, " ev ") {
		t.Errorf("events --since 1h --until 0s -l team=b: %q", out)
	}
	if out := c.ok("events", "--since", "1h", "--until", "0s", "--format", "{{.Type}}/{{.Neuron}}", "-l", "team=b"); out != "created/ev2\nstarted/ev2\n" {
		t.Errorf("events --format: %q", out)
	}
	c.fails(`"yesterday"`, "events", "--since", "yesterday")
	c.fails(`"never"`, "events", "--until", "never")
	c.fails(`label selector "!"`, "events", "-l", "!")
	c.fails("unknown output format", "events", "-o", "yaml")
}

func TestStatsCommand(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "busy")
	c.ok("create", "idle")
	c.ok("exec", "-d", "busy", "--", "sh", "-c", "while :; do :; done")
	var rows []map[string]any
	waittest.For(t, 30*time.Second, "the busy loop's CPU in stats", func() bool {
		rows = nil
		if err := json.Unmarshal([]byte(c.ok("stats", "--no-stream", "-o", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		return len(rows) == 2 && rows[0]["id"] == "busy" && rows[0]["cpuPercent"].(float64) > 30
	})
	for _, r := range rows {
		for _, k := range []string{"cpuSeconds", "memoryBytes", "pids", "diskBytes", "egressBytes", "uptimeSeconds", "status"} {
			if _, ok := r[k]; !ok {
				t.Errorf("stats -o json lacks %s: %v", k, r)
			}
		}
	}
	out := c.ok("stats", "idle")
	if !strings.Contains(out, "MEM USAGE / LIMIT") || !regexp.MustCompile(`idle\s+running\s+\d+\.\d\d%\s+\S+ / -`).MatchString(out) ||
		strings.Contains(out, "busy") {
		t.Errorf("stats idle: %q", out)
	}
	c.ok("destroy", "idle")
	if out := c.ok("stats", "--no-stream", "--format", "{{.ID}}"); out != "busy\n" {
		t.Errorf("stats without ids shows the running neurons: %q", out)
	}
	if out := c.ok("stats", "--no-stream", "-a", "--format", "{{.ID}} {{.Status}}"); out != "busy running\nidle stopped\n" {
		t.Errorf("stats -a: %q", out)
	}
	c.fails("not found", "stats", "ghost")

	// On a terminal: redrawn every second, until interrupted.
	r := c.onPty(t, 160, 24, "stats", "busy")
	waittest.For(t, 20*time.Second, "two tables", func() bool { return strings.Count(r.output(), "MEM USAGE") >= 2 })
	if !regexp.MustCompile(`busy\s+running\s+[1-9]\d*\.\d\d%`).MatchString(plain(r.output())) {
		t.Errorf("live stats: %q", plain(r.output()))
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	if code := r.exit(t); code != 130 {
		t.Errorf("live stats after SIGINT: exit %d", code)
	}
}

// Every lifecycle command through the daemon (the SDK), as locally.
func TestLifecycleThroughTheDaemon(t *testing.T) {
	c := newCLI(t, "process")
	url, _ := c.serve(t)
	api := func(args ...string) []string { return append([]string{"--api", url}, args...) }
	c.ok(api("create", "rd", "--label", "team=a", "--timeout", "30m", "--auto-pause", "10m")...)
	if got := c.ok(api("list", "-l", "team=a", "-o", "name")...); got != "rd\n" {
		t.Errorf("list -l: %q", got)
	}
	c.ok(api("label", "rd", "run=1")...)
	if out := c.ok(api("list", "-o", "wide")...); !regexp.MustCompile(`in (29|30)m \(stop\)\s+run=1,team=a`).MatchString(out) {
		t.Errorf("list -o wide: %q", out)
	}
	if _, errs, code := c.run("", api("timeout", "rd", "1h", "--on-timeout", "pause")...); code != 0 || !strings.Contains(errs, "then pause") {
		t.Errorf("timeout: %d %q", code, errs)
	}
	c.ok(api("pause", "rd")...)
	if _, errs, code := c.run("", api("pause", "rd")...); code != 0 || !strings.Contains(errs, "rd is already paused") {
		t.Errorf("pause again: %d %q", code, errs)
	}
	if out := c.ok(api("status", "rd")...); !strings.Contains(out, "status:    paused") || !strings.Contains(out, "idle rule:") {
		t.Errorf("status: %q", out)
	}
	if out := c.ok(api("stats", "--no-stream", "rd")...); !strings.Contains(out, "paused") {
		t.Errorf("stats: %q", out)
	}
	if out := c.ok(api("exec", "rd", "--", "echo", "awake")...); out != "awake\n" {
		t.Errorf("exec: %q", out)
	}
	if _, errs, code := c.run("", api("resume", "rd")...); code != 0 || !strings.Contains(errs, "rd is already running") {
		t.Errorf("resume: %d %q", code, errs)
	}
	out := c.ok(api("events", "--since", "1h", "--until", "0s", "-l", "team=a")...)
	for _, want := range []string{" created rd (mode=process, by=api", " paused rd ", " resumed rd "} {
		if !strings.Contains(out, want) {
			t.Errorf("events lack %q: %s", want, out)
		}
	}
	c.fails("not found", api("pause", "ghost")...)
	c.fails(`"team in (a"`, api("list", "-l", "team in (a")...)
	c.fails(`"-x"`, api("label", "rd", "--", "-x=1")...)
	c.fails("is not a duration", api("timeout", "rd", "soon")...)
	c.ok(api("destroy", "rd")...)
	c.fails(`is not running`, api("pause", "rd")...)
}

// keeperPIDs returns the pids the keeper log says keepers started with.
func keeperPIDs(t *testing.T, home string) []int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(home, "logs", "keeper.log"))
	var pids []int
	for _, m := range regexp.MustCompile(`msg="keeper started".* pid=(\d+)`).FindAllStringSubmatch(string(b), -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	return pids
}

// gone reports whether process pid has exited (a zombie whose parent is
// gone too counts: it runs nothing).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// timeoutEvents returns the timeout events of neuron id in the home's
// log, read without asking any neuron (status would apply a deadline
// that passed itself).
func timeoutEvents(t *testing.T, home, id string) []events.Event {
	t.Helper()
	lay, err := layout.New(home, "")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := events.Open(lay).Read(events.Filter{Neurons: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for _, ev := range evs {
		if ev.Type == events.Timeout {
			out = append(out, ev)
		}
	}
	return out
}

// A deadline set by a CLI that then exits fires: the CLI started a
// keeper, which applies it, and which exits once nothing is left to
// watch.
func TestDeadlineFiresAfterTheCLIExits(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "dl", "--timeout", "2s")
	deadline := time.Now().Add(2 * time.Second) // no earlier than the neuron's own
	var pids []int
	waittest.For(t, 10*time.Second, "the keeper to start", func() bool { pids = keeperPIDs(t, c.home); return len(pids) > 0 })
	waittest.For(t, 10*time.Second, "the keeper's timeout event", func() bool { return len(timeoutEvents(t, c.home, "dl")) > 0 })
	if late := time.Since(deadline); late > 3*time.Second {
		t.Errorf("the deadline fired %s late", late)
	}
	ev := timeoutEvents(t, c.home, "dl")[0]
	if ev.Principal != "keeper" || !strings.Contains(ev.Reason, "stop") {
		t.Errorf("the timeout event: %+v", ev)
	}
	if got := c.ok("status", "dl", "--format", "{{.Status}}"); got != "stopped\n" {
		t.Errorf("status after the deadline: %q", got)
	}
	waittest.For(t, 15*time.Second, "the keeper to exit", func() bool { return gone(pids[0]) })
	lay, _ := layout.New(c.home, "")
	if keeper.Running(lay) {
		t.Error("a keeper still holds the home")
	}
	if b, _ := os.ReadFile(filepath.Join(c.home, "logs", "keeper.log")); !strings.Contains(string(b), "no neuron has a deadline") {
		t.Errorf("the keeper's log: %s", b)
	}
	if len(pids) != 1 {
		t.Errorf("keepers started: %v", pids)
	}
}

// A daemon that starts while a standalone keeper runs takes the home
// over, and enforces deadlines itself; when it stops, a standalone keeper
// takes the home back.
func TestServeTakesOverTheKeeper(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "long", "--timeout", "1h")
	var pids []int
	waittest.For(t, 10*time.Second, "the standalone keeper", func() bool { pids = keeperPIDs(t, c.home); return len(pids) > 0 })
	url, stop := c.serve(t)
	waittest.For(t, 15*time.Second, "the standalone keeper to give way", func() bool { return gone(pids[0]) })
	lay, _ := layout.New(c.home, "")
	waittest.For(t, 10*time.Second, "the daemon's keeper", func() bool { return keeper.Running(lay) })
	c.ok("--api", url, "create", "short")
	c.ok("--api", url, "timeout", "short", "1s")
	waittest.For(t, 10*time.Second, "the daemon's keeper to apply the deadline", func() bool { return len(timeoutEvents(t, c.home, "short")) > 0 })
	if ev := timeoutEvents(t, c.home, "short")[0]; ev.Principal != "keeper" {
		t.Errorf("the timeout event: %+v", ev)
	}
	if got := keeperPIDs(t, c.home); len(got) != 1 {
		t.Errorf("standalone keepers started: %v (the daemon's keeper logs to the daemon's log)", got)
	}
	// "long" still has its deadline: the stopping daemon hands it over.
	if errs, code := stop(); code != 0 || !strings.Contains(errs, "stopped") {
		t.Fatalf("serve after SIGTERM: %d %q", code, errs)
	}
	waittest.For(t, 10*time.Second, "a standalone keeper after the daemon", func() bool { return len(keeperPIDs(t, c.home)) == 2 })
	waittest.For(t, 10*time.Second, "it to hold the home", func() bool { return keeper.Running(lay) })
	c.ok("timeout", "long", "1s")
	waittest.For(t, 10*time.Second, "the handed-over deadline to fire", func() bool { return len(timeoutEvents(t, c.home, "long")) > 0 })
	if got := c.ok("status", "long", "--format", "{{.Status}}"); got != "stopped\n" {
		t.Errorf("long after its deadline: %q", got)
	}
}

// An idle rule set by a CLI that then exits holds too: the keeper it
// started pauses the idle neuron, and the next request resumes it.
func TestAutoPauseAfterTheCLIExits(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "ap", "--auto-pause", "2s")
	lay, _ := layout.New(c.home, "")
	paused := func() bool {
		evs, err := events.Open(lay).Read(events.Filter{Neurons: []string{"ap"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == events.AutoPaused {
				return true
			}
		}
		return false
	}
	waittest.For(t, 20*time.Second, "the keeper to auto-pause the idle neuron", paused)
	if out := c.ok("status", "ap"); !strings.Contains(out, "status:    paused") || !strings.Contains(out, "idle rule: pause after 2s idle") {
		t.Errorf("status: %q", out)
	}
	if out := c.ok("exec", "ap", "--", "echo", "awake"); out != "awake\n" {
		t.Fatalf("exec after the auto-pause: %q", out)
	}
	if got := c.ok("status", "ap", "--format", "{{.Status}}"); got != "running\n" {
		t.Errorf("after the exec: %q", got)
	}
}
