package confine

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// denied are the system calls a neuron may never make: they change mounts,
// the kernel, time, or namespaces, or reach outside the sandbox. (Those of
// one architecture only are added in seccomp_<arch>.go.)
var denied = map[string]uint32{
	"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT,
	"open_tree": unix.SYS_OPEN_TREE, "move_mount": unix.SYS_MOVE_MOUNT, "fsopen": unix.SYS_FSOPEN,
	"fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK, "mount_setattr": unix.SYS_MOUNT_SETATTR,
	"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "reboot": unix.SYS_REBOOT,
	"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN,
	"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
	"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
	"setns": unix.SYS_SETNS, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
	"userfaultfd": unix.SYS_USERFAULTFD, "swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "acct": unix.SYS_ACCT,
	"quotactl": unix.SYS_QUOTACTL, "settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME,
	"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "adjtimex": unix.SYS_ADJTIMEX, "fanotify_init": unix.SYS_FANOTIFY_INIT,
	"lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE, "vhangup": unix.SYS_VHANGUP,
}

// Offsets into struct seccomp_data (little-endian: an argument's low 32
// bits come first).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
)

// program is the seccomp filter, in classic BPF:
//
//   - a system call of any other architecture than this one (on amd64: the
//     i386 entry point, int 0x80) kills the process: otherwise it would go
//     through unfiltered, with other numbers;
//   - on amd64, the x32 ABI's numbers fail with ENOSYS;
//   - the denied calls fail with EPERM;
//   - unshare and clone with CLONE_NEWUSER fail with EPERM;
//   - clone3, whose flags a filter cannot read, fails with ENOSYS, so that
//     libc falls back to clone; so does io_uring (a large kernel surface
//     whose operations no filter sees);
//   - sockets other than Unix, IPv4, IPv6 and netlink fail with
//     EAFNOSUPPORT: vsock, for one, is not confined by the network
//     namespace, and reaches the hypervisor and the host's VMs;
//   - ioctl TIOCSTI (push bytes into a terminal's input) and TIOCLINUX
//     (the console's selection, which can do the same) fail with EPERM: a
//     terminal a neuron's process holds may be one whose reader is not
//     the neuron. The request is compared on its low 32 bits, all the
//     kernel reads of it (an int), so high bits set cannot slip past;
//   - everything else is allowed.
//
// With nested user namespaces allowed (Options), unshare and clone may
// create user namespaces, and mount, umount2, pivot_root and chroot are
// allowed, so that a program's own sandbox (bubblewrap, say) can build its
// root inside them: the kernel lets those calls touch only mount
// namespaces such a namespace owns, never the neuron's.
func program(o Options) ([]bpf.RawInstruction, error) {
	const (
		allow   = unix.SECCOMP_RET_ALLOW
		eperm   = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		noAFSup = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
		kill    = unix.SECCOMP_RET_KILL_PROCESS
	)
	if nativeArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for %s in this build", runtime.GOARCH)
	}
	var a assembler
	a.add(bpf.LoadAbsolute{Off: offArch, Size: 4})
	a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nativeArch, SkipTrue: 1})
	a.add(bpf.RetConstant{Val: kill})
	a.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	if x32Bit != 0 {
		a.add(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipFalse: 1}, bpf.RetConstant{Val: enosys})
	}
	// One comparison per denied call, each returning at once.
	for _, nr := range deniedNumbers(o) {
		a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1}, bpf.RetConstant{Val: eperm})
	}
	for _, nr := range []uint32{unix.SYS_CLONE3, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER} {
		a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1}, bpf.RetConstant{Val: enosys})
	}
	a.jumpIfEqual(unix.SYS_SOCKET, "family")
	a.jumpIfEqual(unix.SYS_SOCKETPAIR, "family")
	a.jumpIfEqual(unix.SYS_UNSHARE, "flags")
	a.jumpIfEqual(unix.SYS_CLONE, "flags")
	a.jumpIfEqual(unix.SYS_IOCTL, "ioctl")
	a.add(bpf.RetConstant{Val: allow})

	a.label("ioctl") // ioctl(fd, request, ...)
	a.add(bpf.LoadAbsolute{Off: offArg1, Size: 4})
	for _, req := range []uint32{unix.TIOCSTI, unix.TIOCLINUX} {
		a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: req, SkipFalse: 1}, bpf.RetConstant{Val: eperm})
	}
	a.add(bpf.RetConstant{Val: allow})

	a.label("family") // socket(domain, ...), socketpair(domain, ...)
	a.add(bpf.LoadAbsolute{Off: offArg0, Size: 4})
	families := []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}
	if o.Proxy {
		families = families[1:]
	}
	for _, af := range families {
		a.jumpIfEqual(af, "allow")
	}
	a.add(bpf.RetConstant{Val: noAFSup})

	a.label("flags") // unshare(flags), clone(flags, ...)
	if !o.NestedUserns {
		a.add(bpf.LoadAbsolute{Off: offArg0, Size: 4})
		a.add(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_NEWUSER, SkipFalse: 1}, bpf.RetConstant{Val: eperm})
	}
	a.label("allow")
	a.add(bpf.RetConstant{Val: allow})
	insts, err := a.resolve()
	if err != nil {
		return nil, err
	}
	return bpf.Assemble(insts)
}

// assembler collects instructions and resolves forward jumps to labels.
type assembler struct {
	insts  []bpf.Instruction
	jumps  map[int]string // index of a JumpIf -> the label its true branch goes to
	labels map[string]int
}

func (a *assembler) add(insts ...bpf.Instruction) { a.insts = append(a.insts, insts...) }

// jumpIfEqual goes to label when the accumulator equals val.
func (a *assembler) jumpIfEqual(val uint32, label string) {
	if a.jumps == nil {
		a.jumps = map[int]string{}
	}
	a.jumps[len(a.insts)] = label
	a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: val})
}

func (a *assembler) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.insts)
}

func (a *assembler) resolve() ([]bpf.Instruction, error) {
	for at, label := range a.jumps {
		to, ok := a.labels[label]
		skip := to - at - 1
		if !ok || skip < 0 || skip > 255 {
			return nil, fmt.Errorf("seccomp filter: jump from %d to %q (%d) out of reach", at, label, to)
		}
		j := a.insts[at].(bpf.JumpIf)
		j.SkipTrue = uint8(skip)
		a.insts[at] = j
	}
	return a.insts, nil
}

// nestedAllows are the denied calls a nested sandbox needs.
var nestedAllows = map[string]bool{"mount": true, "umount2": true, "pivot_root": true, "chroot": true}

// Options shape the confinement.
type Options struct {
	// NestedUserns lets the neuron's programs create user namespaces of
	// their own (and mount inside them): the policy's explicit consent to
	// inner sandboxes.
	NestedUserns bool
	// Proxy is the host's end of an egress tunnel (EgressTunnel), which
	// after its start only relays: beside DenyFiles' Landlock domain,
	// which does not cover them, it changes no file's mode, owner,
	// attributes or times, listens on no socket (an unbound listen picks
	// a port of its own, past Landlock's bind right), and makes no Unix
	// socket (a path's socket is reached by connect, past Landlock too).
	Proxy bool
}

// proxyDenied are the calls a Proxy is denied besides denied.
var proxyDenied = map[string]uint32{
	"fchmod": unix.SYS_FCHMOD, "fchmodat": unix.SYS_FCHMODAT, "fchmodat2": unix.SYS_FCHMODAT2,
	"fchown": unix.SYS_FCHOWN, "fchownat": unix.SYS_FCHOWNAT,
	"setxattr": unix.SYS_SETXATTR, "lsetxattr": unix.SYS_LSETXATTR, "fsetxattr": unix.SYS_FSETXATTR, "setxattrat": unix.SYS_SETXATTRAT,
	"removexattr": unix.SYS_REMOVEXATTR, "lremovexattr": unix.SYS_LREMOVEXATTR, "fremovexattr": unix.SYS_FREMOVEXATTR,
	"removexattrat": unix.SYS_REMOVEXATTRAT, "utimensat": unix.SYS_UTIMENSAT, "listen": unix.SYS_LISTEN,
}

func deniedNumbers(o Options) []uint32 {
	out := make([]uint32, 0, len(denied)+len(deniedHere))
	for name, nr := range denied {
		if o.NestedUserns && nestedAllows[name] {
			continue
		}
		out = append(out, nr)
	}
	for _, nr := range deniedHere {
		out = append(out, nr)
	}
	if o.Proxy {
		for _, nr := range proxyDenied {
			out = append(out, nr)
		}
		for _, nr := range proxyDeniedHere {
			out = append(out, nr)
		}
	}
	slices.Sort(out)
	return out
}

// Apply confines the calling process and everything it will start: no new
// privileges, the seccomp filter on every thread, and non-dumpable (so
// nothing of the same user can ptrace the agent or read its memory).
func Apply(o Options) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("confine: non-dumpable: %w", err)
	}
	raw, err := program(o)
	if err != nil {
		return fmt.Errorf("confine: seccomp: assembling the filter: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("confine: no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(raw)), Filter: (*unix.SockFilter)(unsafe.Pointer(&raw[0]))}
	// TSYNC: every thread of this process, not just the calling one.
	if r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("confine: seccomp: %w", e)
	} else if r != 0 {
		return fmt.Errorf("confine: seccomp: thread %d could not take the filter", r)
	}
	return nil
}
