package confine

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// Denied are the system calls a neuron may never make: they change mounts,
// the kernel, or namespaces, or reach outside the sandbox.
var Denied = []string{
	"mount", "umount2", "pivot_root", "chroot",
	"kexec_load", "kexec_file_load", "reboot",
	"bpf", "perf_event_open",
	"keyctl", "add_key", "request_key",
	"init_module", "finit_module", "delete_module",
	"setns", "open_by_handle_at", "name_to_handle_at", "userfaultfd",
	"swapon", "swapoff", "acct", "quotactl", "iopl", "ioperm",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"fanotify_init", "lookup_dcookie", "vhangup",
}

// filter is the seccomp policy: Denied fail with EPERM, a new user
// namespace (unshare or clone with CLONE_NEWUSER) fails with EPERM, and
// clone3, whose flags a filter cannot see, fails with ENOSYS so that libc
// falls back to clone.
func filter() seccomp.Filter {
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Action: seccomp.ActionErrno, Names: Denied},
				{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "unshare", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
					{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
				}},
				{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
			},
		},
	}
}

// Apply confines the calling process and everything it will start: no new
// privileges, the seccomp filter on every thread, and non-dumpable (so
// nothing of the same user can ptrace the agent or read its memory).
// Landlock is applied where the kernel has it (see landlock_linux.go).
func Apply() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("confine: non-dumpable: %w", err)
	}
	if err := seccomp.LoadFilter(filter()); err != nil {
		return fmt.Errorf("confine: seccomp: %w", err)
	}
	return nil
}
