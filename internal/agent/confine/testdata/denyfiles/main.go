// The child of confine's TestDenyFiles, built static (DenyFiles needs a
// program without cgo): it opens a file, enters DenyFiles' domain, and
// then tries files and a TCP bind from many threads. It prints what was
// wrong, nothing when all held, "SKIP why" where the kernel has no
// Landlock.
package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/confine"
)

func main() { os.Exit(run(os.Args[1], os.Args[2])) }

func run(dir, portArg string) int {
	kept, err := os.Open(filepath.Join(dir, "kept"))
	if err != nil {
		os.Stdout.WriteString("opening before: " + err.Error() + "\n")
		return 1
	}
	why, err := confine.DenyFiles()
	if err != nil {
		os.Stdout.WriteString("DenyFiles: " + err.Error() + "\n")
		return 1
	}
	if why != "" {
		os.Stdout.WriteString("SKIP " + why + "\n")
		return 0
	}
	var mu sync.Mutex
	say := func(s string) { mu.Lock(); os.Stdout.WriteString(s + "\n"); mu.Unlock() }
	denied := func(what string, err error) {
		if !errors.Is(err, os.ErrPermission) {
			say(what + ": " + errString(err) + ", want permission denied")
		}
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A thread of its own, and new ones: each must be inside.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			_, err := os.ReadFile(filepath.Join(dir, "secret"))
			denied("reading a file", err)
			_, err = os.ReadFile("/etc/hostname")
			denied("reading /etc/hostname", err)
			denied("making a file", os.WriteFile(filepath.Join(dir, "made"+string(rune('a'+i))), nil, 0o600))
			denied("removing a file", os.Remove(filepath.Join(dir, "secret")))
		}()
	}
	wg.Wait()
	denied("running /bin/true", exec.Command("/bin/true").Run())
	if confine.LandlockABI() >= 4 {
		// A plain TCP socket's bind (Go's own listeners are MPTCP, which
		// Landlock's TCP rights do not cover: docs/kube.md).
		port, _ := strconv.Atoi(portArg)
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			say("a TCP socket: " + err.Error())
		} else {
			denied("binding a TCP port", unix.Bind(s, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}))
			unix.Close(s)
		}
	}
	b := make([]byte, 4)
	if n, err := kept.Read(b); err != nil || string(b[:n]) != "kept" {
		say("the descriptor opened before: " + errString(err))
	}
	// What Landlock leaves, the proxy's seccomp filter takes: a file's
	// mode, owner, attributes and times, a listen (which binds a port of
	// its own), a Unix socket.
	if err := confine.Apply(confine.Options{Proxy: true}); err != nil {
		say("Apply: " + err.Error())
		return 1
	}
	secret := filepath.Join(dir, "secret")
	eperm := func(what string, err error) {
		if !errors.Is(err, unix.EPERM) {
			say(what + ": " + errString(err) + ", want EPERM")
		}
	}
	eperm("chmod", unix.Chmod(secret, 0o644))
	eperm("fchmod", kept.Chmod(0o666))
	eperm("chown", unix.Chown(secret, 1, 1))
	eperm("setxattr", unix.Setxattr(secret, "user.x", []byte("y"), 0))
	eperm("utimes", unix.UtimesNano(secret, []unix.Timespec{{}, {}}))
	if s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
		eperm("listen without bind", unix.Listen(s, 1))
		unix.Close(s)
	} else {
		say("a TCP socket: " + err.Error())
	}
	if _, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); !errors.Is(err, unix.EAFNOSUPPORT) {
		say("a Unix socket: " + errString(err) + ", want EAFNOSUPPORT")
	}
	if _, _, err := os.Pipe(); err != nil {
		say("a pipe (the runtime's own): " + err.Error())
	}
	return 0
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
