package link_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// watchedAgent is a real agent over TCP, and its root on the host.
func watchedAgent(t *testing.T) (*link.Client, string) {
	t.Helper()
	l, root := watchedLink(t)
	return l.Client(), root
}

// watchedLink is watchedAgent's link to its agent.
func watchedLink(t *testing.T) (*link.Link, string) {
	t.Helper()
	addr := freeAddr(t)
	const token = "0123456789abcdef0123456789abcdef"
	_, root := startListeningAgent(t, addr, token, io.Discard)
	l := link.Dial(func(context.Context) (string, error) { return addr, nil }, link.Options{Neuron: "t1", Token: token, Software: "test"})
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	return l, root
}

// recorder collects a watch's events.
type recorder struct {
	mu  sync.Mutex
	got []protocol.FsEvent
}

func (r *recorder) add(ev protocol.FsEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ev)
	return nil
}

func (r *recorder) has(name, op string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.got {
		if ev.Name == name && ev.Op == op {
			return true
		}
	}
	return false
}

// watch starts a watch of dir and returns once it is ready; its end
// (the error Watch returned) comes on the channel.
func watch(t *testing.T, c *link.Client, args *protocol.FsWatchArgs) (*recorder, context.CancelFunc, <-chan error) {
	t.Helper()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- c.Watch(ctx, args, func() { close(ready) }, rec.add) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the watch of %s ended before it was ready: %v", args.Path, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the watch of %s is not ready", args.Path)
	}
	return rec, cancel, done
}

// A real agent's watch: creates, writes, renames and removes under the
// directory, a new subdirectory's files when recursive; the watch ends
// when the host cancels it, and when the directory goes.
func TestWatch(t *testing.T) {
	c, root := watchedAgent(t)
	ws := filepath.Join(root, "w")
	os.MkdirAll(filepath.Join(ws, "old"), 0o755)
	os.Symlink("old", filepath.Join(ws, "old-link")) // not followed: its changes are old's
	rec, cancel, done := watch(t, c, &protocol.FsWatchArgs{Path: ws, Recursive: true})
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("1"), 0o644)
	os.Rename(filepath.Join(ws, "a.txt"), filepath.Join(ws, "b.txt"))
	os.Chmod(filepath.Join(ws, "b.txt"), 0o600)
	os.Remove(filepath.Join(ws, "b.txt"))
	os.WriteFile(filepath.Join(ws, "old", "x"), []byte("1"), 0o644)
	os.Mkdir(filepath.Join(ws, "new"), 0o755)
	waittest.For(t, 10*time.Second, "the new directory's create", func() bool { return rec.has("new", protocol.FsCreate) })
	os.WriteFile(filepath.Join(ws, "new", "y"), []byte("1"), 0o644)
	for _, want := range []protocol.FsEvent{
		{Name: "a.txt", Op: protocol.FsCreate}, {Name: "a.txt", Op: protocol.FsWrite}, {Name: "a.txt", Op: protocol.FsRename},
		{Name: "b.txt", Op: protocol.FsCreate}, {Name: "b.txt", Op: protocol.FsChmod}, {Name: "b.txt", Op: protocol.FsRemove},
		{Name: "old/x", Op: protocol.FsCreate}, {Name: "new/y", Op: protocol.FsCreate},
	} {
		waittest.For(t, 10*time.Second, "event "+want.Op+" "+want.Name, func() bool { return rec.has(want.Name, want.Op) })
	}
	if rec.has("old-link/x", protocol.FsCreate) {
		t.Error("a watch followed a symlink to a directory")
	}
	// A directory moved out of the tree is no longer watched.
	os.Mkdir(filepath.Join(ws, "leaving"), 0o755)
	waittest.For(t, 10*time.Second, "the leaving directory's create", func() bool { return rec.has("leaving", protocol.FsCreate) })
	os.Rename(filepath.Join(ws, "leaving"), filepath.Join(root, "elsewhere"))
	waittest.For(t, 10*time.Second, "the move out", func() bool { return rec.has("leaving", protocol.FsRename) })
	os.WriteFile(filepath.Join(root, "elsewhere", "secret"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(ws, "after"), []byte("1"), 0o644)
	waittest.For(t, 10*time.Second, "a change after the move", func() bool { return rec.has("after", protocol.FsCreate) })
	if rec.has("leaving/secret", protocol.FsCreate) {
		t.Error("a change in a directory moved out of the tree was told")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("a cancelled watch: %v", err)
	}

	// Not recursive: a subdirectory's changes are not told.
	flat, _, _ := watch(t, c, &protocol.FsWatchArgs{Path: ws})
	os.WriteFile(filepath.Join(ws, "old", "deep"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(ws, "top"), []byte("1"), 0o644)
	waittest.For(t, 10*time.Second, "the top file", func() bool { return flat.has("top", protocol.FsCreate) })
	if flat.has("old/deep", protocol.FsCreate) {
		t.Error("a flat watch told a subdirectory's change")
	}

	// The directory goes: the watch ends.
	gone := filepath.Join(root, "gone")
	os.Mkdir(gone, 0o755)
	_, _, ended := watch(t, c, &protocol.FsWatchArgs{Path: gone})
	os.Remove(gone)
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the watch of a removed directory: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch of a removed directory did not end")
	}

	// The workdir, named ".".
	dot, cancelDot, _ := watch(t, c, &protocol.FsWatchArgs{Path: "."})
	os.WriteFile(filepath.Join(root, "in-workdir"), []byte("1"), 0o644)
	waittest.For(t, 10*time.Second, "a change in the workdir", func() bool { return dot.has("in-workdir", protocol.FsCreate) })
	cancelDot()

	// A file, a missing path, a symlink to a directory: refused, saying why.
	os.WriteFile(filepath.Join(root, "file"), nil, 0o644)
	os.Symlink(ws, filepath.Join(root, "link"))
	os.Symlink("w", filepath.Join(root, "rel-link"))
	for _, tc := range []struct {
		path  string
		class func(error) bool
		says  string
	}{
		{"file", errdefs.IsInvalid, "not a directory"},
		{"file/x", errdefs.IsInvalid, "not a directory"},
		{"missing", errdefs.IsNotFound, "no such file"},
		{"link", errdefs.IsInvalid, "symlink"},
		{"rel-link", errdefs.IsInvalid, "symlink"},
		{"../outside", errdefs.IsPathEscape, "outside"},
	} {
		p := filepath.Join(root, tc.path)
		err := c.Watch(context.Background(), &protocol.FsWatchArgs{Path: p}, nil, func(protocol.FsEvent) error { return nil })
		if !tc.class(err) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("a watch of %s: %v (%v), want %q", tc.path, err, errdefs.Of(err), tc.says)
		}
	}
}

// A watch the host ends, by cancelling it or because the connection went,
// leaves nothing behind in the agent: its handler returns and its inotify
// instance is closed.
func TestWatchEndReleases(t *testing.T) {
	l, root := watchedLink(t)
	handlers := func() int { return waittest.Goroutines("agent.(*Agent).fsWatch") }
	inotifies := func() int {
		n := 0
		ents, _ := os.ReadDir("/proc/self/fd") // an unreadable /proc counts none: the checks below then fail
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == "anon_inode:inotify" {
				n++
			}
		}
		return n
	}
	base := inotifies()
	for _, end := range []string{"cancel", "connection"} {
		t.Run(end, func(t *testing.T) {
			_, cancel, done := watch(t, l.Client(), &protocol.FsWatchArgs{Path: root, Recursive: true})
			if h, n := handlers(), inotifies(); h != 1 || n != base+1 {
				t.Fatalf("a watch runs %d handlers and %d inotify instances (%d before)", h, n, base)
			}
			if end == "cancel" {
				cancel()
			} else {
				l.Close() // the session ends: every request with it
			}
			waittest.Recv(t, 10*time.Second, "the watch's end", done)
			waittest.For(t, 10*time.Second, "the agent's handler to return", func() bool { return handlers() == 0 })
			waittest.For(t, 10*time.Second, "the inotify instance to close", func() bool { return inotifies() == base })
		})
	}
}

// A recursive watch takes MaxWatchDirs directories: one more that
// appears ends it, and a tree with more is refused, naming the bound.
func TestWatchBound(t *testing.T) {
	c, root := watchedAgent(t)
	big := filepath.Join(root, "big")
	for i := range protocol.MaxWatchDirs - 2 { // with big and big/d: the bound
		os.MkdirAll(filepath.Join(big, "d", "d"+strconv.Itoa(i)), 0o755)
	}
	_, _, done := watch(t, c, &protocol.FsWatchArgs{Path: big, Recursive: true})
	os.Mkdir(filepath.Join(big, "d", "one-more"), 0o755)
	err := waittest.Recv(t, 10*time.Second, "the end of a watch past its bound", done)
	if !errdefs.IsTooLarge(err) || !strings.Contains(err.Error(), "directories") {
		t.Fatalf("a watch that grew past %d directories: %v", protocol.MaxWatchDirs, err)
	}
	err = c.Watch(context.Background(), &protocol.FsWatchArgs{Path: big, Recursive: true}, nil, func(protocol.FsEvent) error { return nil })
	if !errdefs.IsTooLarge(err) || !strings.Contains(err.Error(), "directories") {
		t.Fatalf("a watch of %d directories: %v", protocol.MaxWatchDirs+1, err)
	}
}

// A hostile agent's events end the watch with an error: an unknown op,
// a name that leaves the directory, is absolute, too long or holds a NUL,
// a line that never ends, a stream that is not the watch's, a second
// ready, a change before ready, an end before ready.
func TestWatchRefusesHostileEvents(t *testing.T) {
	const ready = "\x00ready" // a StreamReady event, not StreamFs data
	const end = "\x00end"     // the request's (successful) response
	for name, frames := range map[string][]string{
		"unknown op":     {ready, `{"name":"a","op":"explode"}` + "\n"},
		"ready op":       {ready, `{"name":"a","op":"ready"}` + "\n"},
		"dotdot":         {ready, `{"name":"../../etc/passwd","op":"write"}` + "\n"},
		"inner dotdot":   {ready, `{"name":"a/../../b","op":"write"}` + "\n"},
		"absolute":       {ready, `{"name":"/etc/passwd","op":"write"}` + "\n"},
		"empty name":     {ready, `{"name":"","op":"write"}` + "\n"},
		"nul in name":    {ready, `{"name":"a\u0000b","op":"create"}` + "\n"},
		"oversize name":  {ready, `{"name":"` + strings.Repeat("a", protocol.MaxFsEventName+1) + `","op":"create"}` + "\n"},
		"not json":       {ready, "hello\n"},
		"endless line":   {ready, `{"name":"` + strings.Repeat("a", 40000)},
		"inner dot elem": {ready, `{"name":"a/./b","op":"create"}` + "\n"},
		"ready twice":    {ready, ready},
		"before ready":   {`{"name":"a","op":"create"}` + "\n", ready},
		"end unready":    {end},
	} {
		t.Run(name, func(t *testing.T) {
			l, _ := newListener(t)
			fa := dialFake(t, l, agentHello())
			c := connected(t, l)
			done := make(chan error, 1)
			var got []protocol.FsEvent
			go func() {
				done <- link.NewClient(c).Watch(context.Background(), &protocol.FsWatchArgs{Path: "w"}, nil, func(ev protocol.FsEvent) error { got = append(got, ev); return nil })
			}()
			f := fa.read()
			for _, frame := range frames {
				switch frame {
				case ready:
					fa.write(&protocol.Header{Kind: protocol.KindEvent, ID: f.ID, Stream: protocol.StreamReady}, nil)
				case end:
					fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: json.RawMessage(`{}`)}, nil)
				default:
					for rest := []byte(frame); len(rest) > 0; {
						n := min(len(rest), 16<<10)
						fa.write(&protocol.Header{Kind: protocol.KindEvent, ID: f.ID, Stream: protocol.StreamFs}, rest[:n])
						rest = rest[n:]
					}
				}
			}
			err := waittest.Recv(t, 10*time.Second, "the watch's end", done)
			if err == nil || len(got) != 0 {
				t.Fatalf("%v, events %v", err, got)
			}
		})
	}
}
