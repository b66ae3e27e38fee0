//go:build linux

package link

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// viewFixture is a host directory seen by a neuron as /home/agent, with a
// secret beside it that nothing through the view may reach.
func viewFixture(t *testing.T) (*HostView, string, string) {
	t.Helper()
	base := t.TempDir()
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(filepath.Join(home, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &HostView{Neuron: "/home/agent", Host: home}, home, secret
}

// Links the agent planted never lead the host out of the view: not an
// absolute symlink, not a relative one through "..", not as a directory
// component, not as the file itself; a FIFO is refused without blocking;
// a temporary file to fill is never a link, even one that stays inside.
func TestHostViewConfined(t *testing.T) {
	v, home, secret := viewFixture(t)
	outside := filepath.Dir(secret)
	inside := filepath.Join(home, "ws", "target")
	os.WriteFile(inside, []byte("agent's own file"), 0o644)
	for name, target := range map[string]string{"abs": outside, "rel": "../..", "file": secret, "relfile": "../../secret", "in": "target"} {
		if err := os.Symlink(target, filepath.Join(home, "ws", name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"ws/abs/secret", "ws/rel/secret", "ws/file", "ws/relfile"} {
		if f, err := v.openRead(p); err == nil {
			f.Close()
			t.Errorf("read of %s opened a file outside the view", p)
		}
		if f, err := v.openTemp(p, inoOf(t, secret)); err == nil {
			f.Close()
			t.Errorf("write of %s opened a file outside the view", p)
		}
	}
	if f, err := v.openTemp("ws/in", inoOf(t, inside)); err == nil {
		f.Close()
		t.Error("a temporary file that is a link (to a file inside) was opened")
	}
	// The temporary file is filled only if it is the one the agent made:
	// its inode, one link. A hard link to another file put in its place
	// (or a second name for it) is refused.
	temp := filepath.Join(home, "ws", "temp")
	os.WriteFile(temp, nil, 0o600)
	if f, err := v.openTemp("ws/temp", inoOf(t, temp)+1); err == nil {
		f.Close()
		t.Error("a temporary file of another inode was opened")
	}
	if f, err := v.openTemp("ws/temp", inoOf(t, temp)); err != nil {
		t.Errorf("the agent's own temporary file: %v", err)
	} else {
		f.Close()
	}
	os.Link(temp, filepath.Join(home, "ws", "temp2"))
	if f, err := v.openTemp("ws/temp", inoOf(t, temp)); err == nil {
		f.Close()
		t.Error("a temporary file with a second link was opened")
	}
	if got, _ := os.ReadFile(secret); string(got) != "host secret" {
		t.Fatal("the secret changed")
	}
	if got, _ := os.ReadFile(inside); string(got) != "agent's own file" {
		t.Fatal("a file behind a link was truncated")
	}
	// Paths outside the view are not the view's.
	for _, p := range []string{"/home/agentx/f", "/tmp/f", "/home/agent", "/home/agent/../x"} {
		if _, ok := v.rel(p); ok {
			t.Errorf("rel(%q) accepted a path outside the view", p)
		}
	}
	fifo := filepath.Join(home, "ws", "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan [2]error, 1)
	go func() {
		var errs [2]error
		if f, err := v.openRead("ws/fifo"); err == nil {
			f.Close()
		} else {
			errs[0] = err
		}
		if f, err := v.openTemp("ws/fifo", inoOf(t, fifo)); err == nil {
			f.Close()
		} else {
			errs[1] = err
		}
		done <- errs
	}()
	select {
	case errs := <-done:
		if errs[0] != errNotRegular || errs[1] == nil {
			t.Fatalf("opening a FIFO: %v, want both refused", errs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO blocked")
	}
}

// A temporary file is emptied when opened, and a cancelled copy from a
// source that is not a file stops at its next read.
func TestHostViewTempAndCancel(t *testing.T) {
	v, home, _ := viewFixture(t)
	tmp := filepath.Join(home, "ws", ".f.cortex-1")
	os.WriteFile(tmp, []byte("stale bytes"), 0o644)
	f, err := v.openTemp("ws/.f.cortex-1", inoOf(t, tmp))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := copyInto(ctx, f, []byte("first"), strings.NewReader("never read"))
	f.Close()
	if !errors.Is(err, context.Canceled) || n != 5 {
		t.Fatalf("a cancelled copy: %d, %v", n, err)
	}
	if got, _ := os.ReadFile(tmp); string(got) != "first" {
		t.Fatalf("the temporary file holds %q", got)
	}
}

func TestHostErrorCodes(t *testing.T) {
	for errno, code := range map[syscall.Errno]protocol.Code{syscall.ENOSPC: protocol.CodeTooLarge, syscall.EDQUOT: protocol.CodeTooLarge, syscall.EACCES: protocol.CodePermission, syscall.EISDIR: protocol.CodeBadRequest} {
		var pe *protocol.Error
		if err := hostError("write", "/home/agent/f", errno); !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("%v: %v, want %s", errno, err, code)
		}
	}
}

func inoOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// allocated is how many bytes of disk f's blocks take.
func allocated(t *testing.T, f *os.File) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// reservable skips the test when dir's filesystem cannot allocate blocks
// ahead of the data.
func reservable(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reserve(f, 0, 4<<20)
	if allocated(t, f) < 4<<20 {
		t.Skip("this filesystem does not allocate ahead (fallocate)")
	}
}

// reservation is one call of reserve, with f's size at the time.
type reservation struct {
	file           string
	off, size, was int64
}

// watchReserve records every reservation made until the test ends, and
// makes it.
func watchReserve(t *testing.T) *[]reservation {
	var got []reservation
	prev := reserve
	reserve = func(f *os.File, off, size int64) {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, reservation{filepath.Base(f.Name()), off, size, st.Size()})
		prev(f, off, size)
	}
	t.Cleanup(func() { reserve = prev })
	return &got
}

// A copy allocates the blocks it is about to fill (an upload renamed over
// a file then does not start ext4's writeback at the rename), only in a
// file made for it, at its end, never more than a step ahead of the data
// whatever the neuron's file claims, and gives back what it did not fill.
func TestCopyReserves(t *testing.T) {
	dir := t.TempDir()
	reservable(t, dir)
	data := strings.Repeat("0123456789abcdef", 3<<20/16) // 3 MiB
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(t *testing.T) *os.File {
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	create := func(t *testing.T, name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	same := func(t *testing.T, f *os.File, want string) {
		t.Helper()
		if got, _ := os.ReadFile(f.Name()); string(got) != want {
			t.Fatalf("%s holds %d bytes, not the %d copied", f.Name(), len(got), len(want))
		}
		if a := allocated(t, f); a > int64(len(want))+64<<10 {
			t.Fatalf("%s holds %d bytes of disk for %d bytes of data", f.Name(), a, len(want))
		}
	}

	t.Run("upload", func(t *testing.T) {
		got := watchReserve(t)
		in := open(t)
		in.Seek(1<<20, 0) // what the first chunk carried is not read again
		dst := create(t, "upload")
		n, err := copyInto(context.Background(), dst, []byte(data[:1<<20]), in)
		if err != nil || n != int64(len(data)) {
			t.Fatalf("copyInto: %d, %v", n, err)
		}
		same(t, dst, data)
		if want := []reservation{{"upload", 0, int64(len(data)), 0}}; !slices.Equal(*got, want) {
			t.Fatalf("reserved %+v, want %+v", *got, want)
		}
	})

	t.Run("sparse", func(t *testing.T) {
		f := create(t, "sparse")
		if err := f.Truncate(1 << 40); err != nil { // a terabyte of holes
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(data), 0); err != nil {
			t.Fatal(err)
		}
		if got := knownLen(f); got < int64(len(data)) || got > int64(len(data))+1<<20 {
			t.Fatalf("a 1 TiB file with 3 MiB of data counts %d bytes", got)
		}
	})

	t.Run("ends early", func(t *testing.T) {
		// The first MiB came through the channel; the neuron's file was
		// said to end at 20 MiB and holds 3. A step at most is reserved,
		// at the file's end, and what the step did not fill goes back.
		got := watchReserve(t)
		dst := create(t, "short")
		reserveFresh(Fresh{dst}, 1<<20)
		if _, err := dst.Write([]byte(data[:1<<20])); err != nil {
			t.Fatal(err)
		}
		n, err := copyRange(context.Background(), open(t), "/src", 1<<20, 20<<20, Fresh{dst})
		if err != nil || n != int64(len(data))-1<<20 {
			t.Fatalf("copyRange: %d, %v", n, err)
		}
		same(t, dst, data)
		if len(*got) != 2 || (*got)[0] != (reservation{"short", 0, 1 << 20, 0}) {
			t.Fatalf("reserved %+v", *got)
		}
		if r := (*got)[1]; r.off != r.was || r.off != 1<<20 || r.size > copyStep {
			t.Fatalf("a step reserved %+v: not at the file's end, or more than a step", r)
		}
	})

	t.Run("not made for it", func(t *testing.T) {
		// A caller's own file (stdout redirected to a sparse image) is
		// written at its end; nothing is reserved in it, nothing cut.
		got := watchReserve(t)
		dst := create(t, "image")
		if err := dst.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		dst.Seek(0, io.SeekEnd)
		reserveFresh(dst, 1<<20)
		n, err := copyRange(context.Background(), open(t), "/src", 0, 20<<20, dst)
		if err != nil || n != int64(len(data)) {
			t.Fatalf("copyRange: %d, %v", n, err)
		}
		if len(*got) != 0 {
			t.Fatalf("reserved %+v in a file the copy did not make", *got)
		}
		if st, _ := dst.Stat(); st.Size() != 64<<20+int64(len(data)) {
			t.Fatalf("the caller's file is %d bytes after the copy", st.Size())
		}
	})
}
