package confine

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The filter is tried in a child (a filter cannot be taken off again):
// the test binary runs itself with NSYS_CORTEX_FILTER_CHILD=1.
func TestMain(m *testing.M) {
	if os.Getenv("NSYS_CORTEX_FILTER_CHILD") == "1" {
		os.Exit(filterChild())
	}
	os.Exit(m.Run())
}

func filterChild() int {
	if err := Apply(Options{}); err != nil {
		os.Stdout.WriteString("apply: " + err.Error() + "\n")
		return 1
	}
	check := func(name string, got, want unix.Errno) {
		if got != want {
			os.Stdout.WriteString(name + ": got " + errName(got) + ", want " + errName(want) + "\n")
		}
	}
	_, _, e := unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
	check("keyctl", e, unix.EPERM)
	_, _, e = unix.Syscall(unix.SYS_BPF, 0, 0, 0)
	check("bpf", e, unix.EPERM)
	_, _, e = unix.Syscall(unix.SYS_FSOPEN, 0, 0, 0)
	check("fsopen", e, unix.EPERM)
	_, _, e = unix.Syscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	check("unshare(CLONE_NEWUSER)", e, unix.EPERM)
	_, _, e = unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	check("clone3", e, unix.ENOSYS)
	_, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
	check("io_uring_setup", e, unix.ENOSYS)
	_, _, e = unix.Syscall(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	check("socket(AF_VSOCK)", e, unix.EAFNOSUPPORT)
	_, _, e = unix.Syscall(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)
	check("socket(AF_ALG)", e, unix.EAFNOSUPPORT)
	_, _, e = unix.RawSyscall6(unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0, 0, 0, 0)
	check("socketpair(AF_VSOCK)", e, unix.EAFNOSUPPORT)
	// TIOCSTI on a terminal of this process's own, and with high bits set
	// in the request (the kernel reads an int of it).
	if ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0); err == nil {
		c := byte('x')
		for _, req := range []uintptr{unix.TIOCSTI, 0xffffffff00000000 | unix.TIOCSTI, unix.TIOCLINUX} {
			_, _, e = unix.Syscall(unix.SYS_IOCTL, ptm.Fd(), req, uintptr(unsafe.Pointer(&c)))
			check("ioctl("+strconv.FormatUint(uint64(req), 16)+")", e, unix.EPERM)
		}
		// Other terminal ioctls still work.
		if _, err := unix.IoctlGetWinsize(int(ptm.Fd()), unix.TIOCGWINSZ); err != nil {
			os.Stdout.WriteString("TIOCGWINSZ: " + err.Error() + "\n")
		}
		ptm.Close()
	} else {
		os.Stdout.WriteString("no /dev/ptmx to try TIOCSTI on: " + err.Error() + "\n")
	}
	for _, af := range []int{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
		typ := unix.SOCK_STREAM
		if af == unix.AF_NETLINK {
			typ = unix.SOCK_RAW
		}
		if fd, err := unix.Socket(af, typ, 0); err != nil {
			os.Stdout.WriteString("socket(" + strconv.Itoa(af) + "): " + err.Error() + "\n")
		} else {
			unix.Close(fd)
		}
	}
	if runtime.GOARCH == "amd64" {
		_, _, e = unix.Syscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
		check("x32 getpid", e, unix.ENOSYS)
	}
	if pid, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0); e != 0 || int(pid) != os.Getpid() {
		os.Stdout.WriteString("getpid failed\n")
	}
	// Starting programs (clone without CLONE_NEWUSER) still works.
	if err := exec.Command("/bin/true").Run(); err != nil {
		os.Stdout.WriteString("running /bin/true: " + err.Error() + "\n")
	}
	if unix.Prctl(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == nil {
		if v, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); v != 1 {
			os.Stdout.WriteString("no_new_privs is not set\n")
		}
	}
	return 0
}

func errName(e unix.Errno) string {
	if e == 0 {
		return "success"
	}
	return unix.ErrnoName(e)
}

func TestFilter(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NSYS_CORTEX_FILTER_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("under the filter: %v\n%s", err, out)
	}
}

func TestProgramIsDeterministic(t *testing.T) {
	a, err := program(Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := program(Options{})
	if len(a) != len(b) {
		t.Fatalf("%d and %d instructions", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("instruction %d differs between two builds of the filter", i)
		}
	}
}
