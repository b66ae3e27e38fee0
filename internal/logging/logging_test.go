package logging

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// readRecords parses every line of the file at path as a JSON record.
func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q is not a JSON record: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

func mustLevels(t *testing.T, spec string) Levels {
	t.Helper()
	l, err := ParseLevels(spec)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestComponentLevels(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	var console bytes.Buffer
	l, err := New(Options{Dir: dir, Levels: mustLevels(t, "info,api=debug,sandbox=warn"), Console: &console})
	if err != nil {
		t.Fatal(err)
	}
	api, sb, other := l.For("api"), l.For("sandbox"), l.For("store")
	api.Debug("api debug", "n", 1)
	sb.Debug("sandbox debug")
	sb.Info("sandbox info")
	sb.Warn("sandbox warn")
	other.Debug("store debug")
	other.Info("store info")
	api.With("req", "r1").WithGroup("g").Info("grouped", "k", "v")
	l.For("").Info("no component")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	api.Error("after close") // dropped, and no file reopened

	recs := readRecords(t, l.Path())
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%v/%v/%v", r["component"], r["level"], r["msg"]))
		if ts, _ := r["time"].(string); !strings.HasSuffix(ts, "Z") {
			t.Errorf("time %q is not UTC", ts)
		}
	}
	want := []string{"api/DEBUG/api debug", "sandbox/WARN/sandbox warn", "store/INFO/store info", "api/INFO/grouped", "<nil>/INFO/no component"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if recs[0]["n"] != 1.0 || recs[3]["req"] != "r1" || recs[3]["g"].(map[string]any)["k"] != "v" {
		t.Errorf("attributes lost: %v %v", recs[0], recs[3])
	}
	if c := console.String(); !strings.Contains(c, `level=DEBUG msg="api debug" component=api n=1`) || strings.Contains(c, "sandbox debug") {
		t.Errorf("console:\n%s", c)
	}
	if st, err := os.Stat(l.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v %v", st.Mode(), err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v %v", st.Mode(), err)
	}
	if filepath.Base(l.Path()) != DefaultFile {
		t.Errorf("path %s", l.Path())
	}
}

func TestConcurrentWritersWholeLines(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir(), Levels: mustLevels(t, "debug"), Console: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 300
	pad := strings.Repeat("x", 2000) // longer than a pipe's atomic write
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			lg := l.For(fmt.Sprintf("c%d", i))
			for j := range each {
				lg.Info("record", "writer", i, "seq", j, "pad", pad)
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, l.Path()) // fails on any torn line
	if len(recs) != writers*each {
		t.Fatalf("%d records, want %d", len(recs), writers*each)
	}
	for _, r := range recs {
		if r["component"] != fmt.Sprintf("c%v", r["writer"]) || r["pad"] != pad {
			t.Fatalf("record mixed up: %v", r["component"])
		}
	}
}

func backups(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "cortex-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRotateBySize(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Options{Dir: dir, MaxSize: 1, MaxFiles: 2}) // rounded up to lumberjack's 1 MiB
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lg := l.For("test")
	pad := strings.Repeat("y", 1000)
	for i := range 1500 { // ~1.5 MB
		lg.Info("fill", "i", i, "pad", pad)
	}
	b := backups(t, dir)
	if len(b) != 1 {
		t.Fatalf("backups %v, want one", b)
	}
	for _, p := range append(b, l.Path()) {
		if st, err := os.Stat(p); err != nil || st.Size() > 1<<20 {
			t.Errorf("%s: %v %v", p, st.Size(), err)
		}
		readRecords(t, p) // whole lines on both sides of the cut
	}
}

func TestRotateDaily(t *testing.T) {
	if got := nextMidnight(time.Date(2026, 3, 4, 23, 59, 59, 0, time.FixedZone("X", -5*3600))); !got.Equal(time.Date(2026, 3, 6, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("nextMidnight = %v", got)
	}
	if got := nextMidnight(time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("nextMidnight at midnight = %v", got)
	}

	dir := t.TempDir()
	var planned atomic.Int32 // rotations planned: each one after the first follows a midnight passed
	l, err := newLogger(Options{Dir: dir}, func(t time.Time) time.Time { planned.Add(1); return t.Add(20 * time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	// Three midnights have passed with the file empty (the rotation
	// planned after each decides on the previous one).
	waittest.For(t, 30*time.Second, "three midnights", func() bool { return planned.Load() >= 4 })
	if b := backups(t, dir); len(b) != 0 {
		t.Fatalf("an empty file was rotated: %v", b)
	}
	l.For("test").Info("one")
	waittest.Until(30*time.Second, func() bool { return len(backups(t, dir)) > 0 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.done:
	default:
		t.Fatal("the rotation goroutine outlived Close")
	}
	b := backups(t, dir)
	if len(b) != 1 {
		t.Fatalf("backups %v, want one", b)
	}
	if recs := readRecords(t, b[0]); len(recs) != 1 || recs[0]["msg"] != "one" {
		t.Fatalf("backup holds %v", recs)
	}
}

func TestNewErrors(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Options{
		"no dir":             {},
		"file with a path":   {Dir: t.TempDir(), File: "../x.log"},
		"negative size":      {Dir: t.TempDir(), MaxSize: -1},
		"dir under a file":   {Dir: filepath.Join(notDir, "logs")},
		"negative max files": {Dir: t.TempDir(), MaxFiles: -1},
	} {
		if l, err := New(o); err == nil {
			l.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestDiscard(t *testing.T) {
	l := Discard()
	lg := l.For("api")
	if lg.Enabled(context.Background(), slog.LevelError) {
		t.Error("Discard is enabled")
	}
	lg.Error("nothing")
	if l.Path() != "" || l.Close() != nil || l.Close() != nil {
		t.Error("Discard path or Close")
	}
}

// syncBuffer is a bytes.Buffer for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTailFollow(t *testing.T) {
	old := tailPoll
	tailPoll = 10 * time.Millisecond
	t.Cleanup(func() { tailPoll = old })

	dir := t.TempDir()
	path := filepath.Join(dir, "cortex.log")
	appendTo := func(p, s string) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	appendTo(path, "one\n")

	var out bytes.Buffer
	if err := Tail(context.Background(), path, &out, false); err != nil || out.String() != "one\n" {
		t.Fatalf("Tail = %q %v", out.String(), err)
	}
	if err := Tail(context.Background(), filepath.Join(dir, "none.log"), &out, false); err == nil || !strings.Contains(err.Error(), "none.log") {
		t.Fatalf("Tail of a missing file = %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var buf syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- Tail(ctx, path, &buf, true) }()
	waitFor := func(want string) {
		t.Helper()
		if !waittest.Until(30*time.Second, func() bool { return buf.String() == want }) {
			cancel()
			t.Fatalf("tail printed %q, want %q", buf.String(), want)
		}
	}
	waitFor("one\n")
	appendTo(path, "two\n")
	waitFor("one\ntwo\n")

	// Rotation as lumberjack does it: the file moves aside, a new one
	// takes its name. A line written to the old file just before the move
	// is not lost.
	appendTo(path, "three\n")
	if err := os.Rename(path, filepath.Join(dir, "cortex-1.log")); err != nil {
		t.Fatal(err)
	}
	appendTo(path, "four\n")
	waitFor("one\ntwo\nthree\nfour\n")

	// Truncation in place starts over.
	if err := os.WriteFile(path, []byte("5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("one\ntwo\nthree\nfour\n5\n")

	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Tail returned %v after its context ended", err)
	}
}

func TestParseLevels(t *testing.T) {
	for _, tc := range []struct {
		spec, want string
	}{
		{"info", "info"},
		{"debug", "debug"},
		{"WARN", "warn"},
		{"info,api=debug,sandbox=warn", "info,api=debug,sandbox=warn"},
		{" error , api = debug ", "error,api=debug"},
		{"api=debug", "info,api=debug"},
		{"sandbox.docker=error,debug", "debug,sandbox.docker=error"},
	} {
		l, err := ParseLevels(tc.spec)
		if err != nil || l.String() != tc.want {
			t.Errorf("ParseLevels(%q) = %q, %v; want %q", tc.spec, l.String(), err, tc.want)
		}
	}
	l := mustLevels(t, "warn,api=debug")
	if l.Level("api") != slog.LevelDebug || l.Level("other") != slog.LevelWarn {
		t.Errorf("Level: %v %v", l.Level("api"), l.Level("other"))
	}
	for spec, want := range map[string]string{
		"":                   "empty level spec; want LEVEL[,component=LEVEL...] with levels debug, info, warn, error",
		"verbose":            `level "verbose" in level spec "verbose" is not one of debug, info, warn, error`,
		"info,api=loud":      `level "loud" in level spec "info,api=loud" is not one of debug, info, warn, error`,
		"info,,api=debug":    `empty entry in level spec "info,,api=debug"`,
		"info,":              `empty entry`,
		"info,warn":          `gives the default level twice`,
		"api=debug,api=warn": `gives component "api" twice`,
		"=debug":             `component "" in level spec`,
		"a b=debug":          `component "a b" in level spec`,
		"api=":               `level "" in level spec "api="`,
		"api=debug=x":        `level "debug=x"`,
	} {
		_, err := ParseLevels(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLevels(%q) = %v; want %q", spec, err, want)
		}
	}
}
