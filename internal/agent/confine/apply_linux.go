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
//     libc falls back to clone;
//   - everything else is allowed.
func program() ([]bpf.RawInstruction, error) {
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		kill  = unix.SECCOMP_RET_KILL_PROCESS
	)
	if nativeArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for %s in this build", runtime.GOARCH)
	}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nativeArch, SkipTrue: 1},
		bpf.RetConstant{Val: kill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if x32Bit != 0 {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipFalse: 1}, bpf.RetConstant{Val: enosy})
	}
	// One comparison per denied call, each returning at once.
	for _, nr := range deniedNumbers() {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1}, bpf.RetConstant{Val: eperm})
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipFalse: 1},
		bpf.RetConstant{Val: enosy},
		// unshare or clone: look at the flags.
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_UNSHARE, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE, SkipTrue: 1},
		bpf.RetConstant{Val: allow},
		bpf.LoadAbsolute{Off: offArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_NEWUSER, SkipFalse: 1},
		bpf.RetConstant{Val: eperm},
		bpf.RetConstant{Val: allow},
	)
	return bpf.Assemble(p)
}

func deniedNumbers() []uint32 {
	out := make([]uint32, 0, len(denied)+len(deniedHere))
	for _, nr := range denied {
		out = append(out, nr)
	}
	for _, nr := range deniedHere {
		out = append(out, nr)
	}
	slices.Sort(out)
	return out
}

// Apply confines the calling process and everything it will start: no new
// privileges, the seccomp filter on every thread, and non-dumpable (so
// nothing of the same user can ptrace the agent or read its memory).
func Apply() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("confine: non-dumpable: %w", err)
	}
	raw, err := program()
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
