// Command escape tries, from inside a neuron, everything a neuron must not
// be able to do, and prints one JSON object: attempt -> "denied: why" or
// "ALLOWED". The security tests copy it into a neuron, in every mode, and
// run it there (sandboxtest's Boundary/Escapes, nsbox's TestEscapesFail).
//
//	escape -file PATH -port N -pid N -agent N [-host-abstract NAME]   the escapes
//	escape -hog BYTES                    allocate and touch BYTES of memory
//	escape -int80                        keyctl through the i386 entry point (amd64)
//	escape -abstract NAME                connect to the abstract Unix socket @NAME
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	file := flag.String("file", "", "a host file planted outside the neuron")
	port := flag.Int("port", 0, "a TCP port listening on the host's loopback")
	pid := flag.Int("pid", 0, "a host process")
	agent := flag.Int("agent", 0, "the agent's pid (inside)")
	hog := flag.Int64("hog", 0, "allocate this many bytes and touch them")
	i386 := flag.Bool("int80", false, "call keyctl through the i386 entry point and print what it returned")
	abstract := flag.String("abstract", "", "connect to the abstract Unix socket @NAME and print what happened")
	hostAbstract := flag.String("host-abstract", "", "an abstract Unix socket @NAME the host listens on")
	flag.Parse()
	if *abstract != "" {
		c, err := net.Dial("unix", "@"+*abstract)
		if err != nil {
			fmt.Println("denied:", err)
			return
		}
		c.Close()
		fmt.Println("ALLOWED")
		return
	}
	if *i386 {
		// KEYCTL_GET_KEYRING_ID of the session keyring, creating it: a
		// key serial when the call went through.
		fmt.Println(int32(int80(i386Keyctl, 0, ^uintptr(2), 1)))
		return
	}
	if *hog > 0 {
		b := make([]byte, *hog)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated", len(b))
		return
	}
	res := map[string]string{}
	try := func(name string, err error) {
		if err == nil {
			res[name] = "ALLOWED"
		} else {
			res[name] = "denied: " + err.Error()
		}
	}
	_, err := os.ReadFile(*file)
	try("read planted host file", err)
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(*port), 2*time.Second)
	if c != nil {
		c.Close()
	}
	try("connect to host loopback", err)
	try("signal host process", unix.Kill(*pid, 0))
	try("mount tmpfs", unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
	try("umount /proc", unix.Unmount("/proc", unix.MNT_DETACH))
	try("pivot_root", unix.PivotRoot("/tmp", "/tmp"))
	try("chroot", unix.Chroot("/tmp"))
	_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(*agent), 0)
	try("ptrace the agent", errnoErr(e))
	_, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", *agent))
	try("read the agent's environment", err)
	_, err = os.ReadFile(fmt.Sprintf("/proc/%d/mem", *agent))
	try("read the agent's memory", err)
	_, _, e = unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1, 0)
	try("ptrace pid 1", errnoErr(e))
	img := []byte("\x7fELF")
	_, _, e = unix.Syscall(unix.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&img[0])), uintptr(len(img)), uintptr(unsafe.Pointer(&[]byte{0}[0])))
	try("init_module", errnoErr(e))
	fd, _ := unix.Open("/proc/self/exe", unix.O_RDONLY, 0)
	_, _, e = unix.Syscall(unix.SYS_FINIT_MODULE, uintptr(fd), uintptr(unsafe.Pointer(&[]byte{0}[0])), 0)
	try("finit_module", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	try("unshare a user namespace", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_UNSHARE, unix.CLONE_NEWNS, 0, 0)
	try("unshare a mount namespace", errnoErr(e))
	nsfd, _ := unix.Open("/proc/1/ns/mnt", unix.O_RDONLY, 0)
	_, _, e = unix.Syscall(unix.SYS_SETNS, uintptr(nsfd), 0, 0)
	try("setns", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_BPF, 0, 0, 0)
	try("bpf", errnoErr(e))
	_, _, e = unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
	try("perf_event_open", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
	try("keyctl", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)
	try("userfaultfd", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, 0, 0, 0)
	try("open_by_handle_at", errnoErr(e))
	_, _, e = unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)
	try("kexec_load", errnoErr(e))
	try("setuid 0", syscall.Setuid(0))
	try("write the host's /usr", os.WriteFile("/usr/bin/cortex-escape-test", []byte("x"), 0o755))
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: 1 << unix.CAP_SYS_ADMIN, Permitted: 1 << unix.CAP_SYS_ADMIN}}
	try("raise CAP_SYS_ADMIN", unix.Capset(&hdr, &data[0]))
	vs, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(vs)
	}
	try("a vsock socket (not confined by the network namespace)", err)
	_, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&[120]byte{})), 0)
	try("io_uring_setup", errnoErr(e))
	_, err = os.ReadDir("/proc/1/task")
	try("see PID 1 in /proc (its threads show the host's network)", err)
	if haveInt80 {
		try("keyctl through the i386 entry point", i386Call())
	}
	try("TIOCSTI into a terminal", tiocsti())
	try("mknod a device", unix.Mknod("escape-null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	try("open a disk or memory device", openDevice())
	try("hard-link a file of root's", hardlinkRoot())
	if *hostAbstract != "" {
		c, err := net.Dial("unix", "@"+*hostAbstract)
		if c != nil {
			c.Close()
		}
		try("connect to the host's abstract socket", err)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

// tiocsti pushes a byte into the input of a terminal this process holds,
// with the request's high bits set as well (the kernel reads only its low
// 32): on a terminal whose reader is not the neuron, that types commands
// into someone else's shell.
func tiocsti() error {
	c := byte('x')
	var errs []error
	for _, path := range []string{"/dev/tty", "/dev/ptmx"} {
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, req := range []uintptr{unix.TIOCSTI, 0xffffffff00000000 | unix.TIOCSTI} {
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(unsafe.Pointer(&c))); e == 0 {
				f.Close()
				return nil
			} else {
				errs = append(errs, fmt.Errorf("%s: %w", path, e))
			}
		}
		f.Close()
	}
	return fmt.Errorf("%v", errs)
}

// openDevice opens, for reading, a disk or memory device of the machine.
func openDevice() error {
	var errs []string
	for _, d := range []string{"/dev/mem", "/dev/kmem", "/dev/port", "/dev/sda", "/dev/vda", "/dev/vdb", "/dev/nvme0n1", "/dev/loop0", "/dev/loop-control", "/dev/kvm"} {
		f, err := os.Open(d)
		if err == nil {
			f.Close()
			return nil
		}
		if !os.IsNotExist(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) == 0 {
		return fmt.Errorf("none of them here")
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

// hardlinkRoot links a root-owned file the neuron cannot write into its
// own directory: with protected hard links, only an owner may.
func hardlinkRoot() error {
	var errs []string
	for _, f := range []string{"/etc/shadow", "/etc/passwd", "/bin/sh", "/usr/bin/env"} {
		var st unix.Stat_t
		if unix.Stat(f, &st) != nil || st.Uid == uint32(os.Getuid()) {
			continue
		}
		err := os.Link(f, "escape-hardlink")
		if err == nil {
			os.Remove("escape-hardlink")
			return nil
		}
		errs = append(errs, err.Error())
	}
	if len(errs) == 0 {
		return fmt.Errorf("no file of another owner to try")
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

// i386Call runs `escape -int80`: a seccomp filter that checks only the
// native architecture lets a 32-bit system call through.
func i386Call() error {
	out, err := exec.Command("/proc/self/exe", "-int80").Output()
	if err != nil {
		return err // killed (SIGSYS from seccomp; SIGSEGV without the 32-bit ABI)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("unexpected output %q", out)
	}
	if n < 0 {
		return syscall.Errno(-n)
	}
	return nil
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
