package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// checkLines reads the file and checks that every line is a whole entry,
// numbered 1..n in order, ids unique: what concurrent writers must leave.
func checkLines(t *testing.T, path string) []Entry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end on a line boundary", path)
	}
	var out []Entry
	seen := map[string]bool{}
	for i, line := range bytes.Split(data[:len(data)-1], []byte{'\n'}) {
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("line %d is not a whole entry (%v): %.200s", i+1, err, line)
		}
		if e.Line != i+1 || seen[e.ID] {
			t.Fatalf("line %d: n=%d id=%s (seen before: %v)", i+1, e.Line, e.ID, seen[e.ID])
		}
		seen[e.ID] = true
		out = append(out, e)
	}
	return out
}

func TestTornLastLine(t *testing.T) {
	t.Parallel()
	for name, tail := range map[string]string{
		"no newline":          `{"id":"torn0001","parentId":"x","type":"message","message":{"role":"us`,
		"invalid JSON":        "{\"id\":\"torn0001\",\"par\x00\n",
		"a lone half newline": `{"id":`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := newManager(t)
			s := create(t, m)
			for _, txt := range []string{"u1", "a1", "u2"} {
				must(t)(s.AppendMessage(user(txt)))
			}
			s.Close()
			appendRaw(t, s.File(), tail)

			r, err := m.Open(s.ID())
			if err != nil {
				t.Fatalf("a torn last line is fatal: %v", err)
			}
			if rep := r.Report(); rep.TornBytes != int64(len(tail)) {
				t.Errorf("report %+v, want %d torn bytes", rep, len(tail))
			}
			if got := texts(r.Messages()); strings.Join(got, ",") != "u1,a1,u2" {
				t.Errorf("messages %q", got)
			}
			must(t)(r.AppendMessage(assistant("a2")))
			lines := checkLines(t, r.File())
			if len(lines) != 5 || lines[4].Message.Text() != "a2" {
				t.Fatalf("after repair: %d lines", len(lines))
			}
			r2 := reopen(t, m, r)
			if rep := r2.Report(); rep.TornBytes != 0 || len(rep.Skipped) != 0 {
				t.Errorf("after repair %+v", rep)
			}
			if got := texts(r2.Messages()); strings.Join(got, ",") != "u1,a1,u2,a2" {
				t.Errorf("messages %q", got)
			}
		})
	}
}

func TestTornHeaderIsAnError(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	os.MkdirAll(m.Dir(), 0o700)
	os.WriteFile(filepath.Join(m.Dir(), "half.jsonl"), []byte(`{"id":"abc","parentId":"","type":"hea`), 0o600)
	if _, err := m.Open("half"); !IsCorrupt(err) {
		t.Errorf("a session without a whole header: %v", err)
	}
}

func TestCorruptMiddleLine(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	for _, txt := range []string{"u1", "a1", "u2", "a2"} {
		must(t)(s.AppendMessage(user(txt)))
	}
	s.Close()
	data, _ := os.ReadFile(s.File())
	lines := strings.SplitAfter(string(data), "\n")
	// Line 3 (a1) is replaced by garbage: u2, whose parent it was, loses it.
	lines[2] = "garbage {{\n"
	os.WriteFile(s.File(), []byte(strings.Join(lines, "")), 0o600)

	_, err := m.Open(s.ID())
	var cerr *CorruptError
	if !errors.As(err, &cerr) || cerr.Line != 3 || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), s.File()) {
		t.Fatalf("strict open: %v", err)
	}

	r, err := NewManager(m.Dir(), Lenient()).Open(s.ID())
	if err != nil {
		t.Fatalf("lenient open: %v", err)
	}
	defer r.Close()
	rep := r.Report()
	if len(rep.Skipped) != 2 || rep.Skipped[0].Line != 3 || rep.Skipped[1].Line != 4 {
		t.Errorf("report %+v", rep.Skipped)
	}
	if got := texts(r.Messages()); strings.Join(got, ",") != "u2,a2" {
		t.Errorf("lenient messages %q: the path stops at the lost entry", got)
	}
	// Appends keep working and number lines past the skipped one.
	e := must(t)(r.AppendMessage(user("u3")))
	if e.Line != 6 {
		t.Errorf("line %d", e.Line)
	}
}

func TestTooLargeEntry(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	_, err := s.AppendMessage(user(strings.Repeat("x", MaxLineSize)))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "message entry") {
		t.Fatalf("oversized entry: %v", err)
	}
	must(t)(s.AppendMessage(user("small")))
	if lines := checkLines(t, s.File()); len(lines) != 2 {
		t.Errorf("%d lines", len(lines))
	}
}

func TestClosedSession(t *testing.T) {
	t.Parallel()
	s := create(t, newManager(t))
	s.Close()
	if _, err := s.AppendMessage(user("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if s.Path()[0].Type != TypeHeader {
		t.Error("reads fail after close")
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	other, err := m.Open(s.ID()) // a second Session on the same file
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const n = 200
	big := strings.Repeat("y", 64<<10) // lines larger than a pipe buffer or a page
	var wg sync.WaitGroup
	for w, sess := range []*Session{s, s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				text := fmt.Sprintf("w%d-%d", w, i)
				if i%10 == 0 {
					text += big
				}
				if _, err := sess.AppendMessage(user(text)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if lines := checkLines(t, s.File()); len(lines) != 1+3*n {
		t.Fatalf("%d lines, want %d", len(lines), 1+3*n)
	}
	r := reopen(t, m, s)
	if got := len(r.Entries()); got != 1+3*n {
		t.Errorf("reopened with %d entries", got)
	}
}

// TestHelperAppender is the child of TestConcurrentProcesses.
func TestHelperAppender(t *testing.T) {
	dir, id := os.Getenv("SESSION_TEST_DIR"), os.Getenv("SESSION_TEST_ID")
	if dir == "" {
		t.Skip("run by TestConcurrentProcesses in a child process")
	}
	n, _ := strconv.Atoi(os.Getenv("SESSION_TEST_N"))
	s, err := NewManager(dir).Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := strings.Repeat("z", 100<<10)
	for i := range n {
		text := fmt.Sprintf("pid%d-%d", os.Getpid(), i)
		if i%5 == 0 {
			text += big
		}
		if _, err := s.AppendMessage(llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Text: text}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConcurrentProcesses(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	s.Close()
	const n, procs = 150, 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	for range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperAppender$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SESSION_TEST_DIR="+m.Dir(), "SESSION_TEST_ID="+s.ID(), "SESSION_TEST_N="+strconv.Itoa(n))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("child output:\n%s", out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}
	lines := checkLines(t, s.File())
	if len(lines) != 1+procs*n {
		t.Fatalf("%d lines, want %d", len(lines), 1+procs*n)
	}
	perProc := map[string]int{}
	for _, e := range lines[1:] {
		pid, _, _ := strings.Cut(e.Message.Text(), "-")
		perProc[pid]++
	}
	if len(perProc) != procs {
		t.Errorf("writers %v", perProc)
	}
}

func TestListReadsOnlyTheEnds(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	must(t)(s.AppendMessage(user("u1")))
	s.Close()
	// 64 MiB of zeros (sparse, no newline) then one good line numbered 42:
	// counting lines would say 3, parsing would fail; List reads the "n".
	f, err := os.OpenFile(s.File(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if err := f.Truncate(st.Size() + 64<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	appendRaw(t, s.File(), "\n"+`{"id":"last0001","parentId":"x","type":"message","time":"2030-01-01T00:00:00Z","message":{"role":"user","parts":[]},"n":42}`+"\n")

	list, err := m.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("%v %v", list, err)
	}
	if i := list[0]; i.Err != nil || i.Entries != 42 || i.Title != "fix the build" || i.Size < 64<<20 {
		t.Errorf("info %+v", i)
	}
	if i, err := m.Info(s.ID()); err != nil || i != list[0] {
		t.Errorf("Info %+v, %v; List said %+v", i, err, list[0])
	}
	if _, err := m.Open(s.ID()); !IsCorrupt(err) {
		t.Errorf("the file is corrupt for Open: %v", err)
	}
}

// TestInfo: Info of one session is what List says of it, without a
// listing; a missing one is ErrNotFound, a bad id refused, and a file
// without a header describes itself with the error.
func TestInfo(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	must(t)(s.AppendMessage(user("u1")))
	s.Close()
	list, err := m.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("%v %v", list, err)
	}
	if i, err := m.Info(s.ID()); err != nil || i != list[0] || i.Entries != 2 {
		t.Errorf("Info %+v, %v; List said %+v", i, err, list[0])
	}
	if _, err := m.Info("nosuchsession"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info of a missing session: %v", err)
	}
	if _, err := m.Info("../x"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Info of a bad id: %v", err)
	}
	if err := os.WriteFile(s.File(), []byte("no header\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if i, err := m.Info(s.ID()); !IsCorrupt(err) || i.ID != s.ID() || i.Size != 10 {
		t.Errorf("Info of a file without a header: %+v, %v", i, err)
	}
}

func TestListLargeSession(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	buildSession(t, s, 10_000)
	start := time.Now()
	list, err := m.List()
	if err != nil || len(list) != 1 || list[0].Entries != 10_001 {
		t.Fatalf("%+v %v", list, err)
	}
	t.Logf("List of one %d-entry session (%d bytes): %v", list[0].Entries, list[0].Size, time.Since(start))
}
