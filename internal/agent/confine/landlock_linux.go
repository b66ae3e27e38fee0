package confine

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock scoping (ABI 6, Linux 6.12): a process in the domain cannot
// connect to an abstract Unix socket made outside it, nor signal a process
// outside it. The abstract socket namespace belongs to the network
// namespace, so a neuron with network full would otherwise reach every
// abstract socket of the host (a desktop's X server, a container runtime's
// shims, systemd's); and a rootless neuron's commands, of the host user's
// uid, could signal that user's processes.
const (
	landlockScopeAbstractUnixSocket = 1 << 0
	landlockScopeSignal             = 1 << 1
	landlockCreateRulesetVersion    = 1 << 0
	// LandlockScopeABI is the first ABI with scoping.
	LandlockScopeABI = 6
)

// landlockRuleset is struct landlock_ruleset_attr as of ABI 6.
type landlockRuleset struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// LandlockABI returns the kernel's Landlock ABI version, 0 when it has
// none (or it is disabled).
func LandlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, landlockCreateRulesetVersion)
	if e != 0 {
		return 0
	}
	return int(v)
}

// LandlockedFlag marks an agent that runs in its Landlock domain already
// (EnterLandlock added it when it executed the agent again).
const LandlockedFlag = "--landlocked"

// EnterLandlock puts this process in a Landlock domain scoped for abstract
// Unix sockets and signals, where the kernel has ABI 6 or later, and
// returns only when it has none (a reason why). A domain is a thread's:
// Go's other threads would stay outside, and each thread that restricted
// itself would get a sibling domain, so instead one locked thread enters
// the domain and executes this program again (args, with LandlockedFlag):
// the new image starts on that thread, its every thread in the one domain.
// Call it before anything is started, before the agent becomes what the
// host talks to.
func EnterLandlock(args []string) (string, error) {
	abi := LandlockABI()
	if abi < LandlockScopeABI {
		return fmt.Sprintf("Landlock not applied: the kernel's ABI is %d (scoping needs %d)", abi, LandlockScopeABI), nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("confine: no_new_privs: %w", err)
	}
	runtime.LockOSThread() // never unlocked: the thread ends with the exec
	attr := landlockRuleset{scoped: landlockScopeAbstractUnixSocket | landlockScopeSignal}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return "", fmt.Errorf("confine: landlock ruleset: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		unix.Close(int(fd))
		return "", fmt.Errorf("confine: landlock: %w", e)
	}
	unix.Close(int(fd))
	argv := append(append([]string{}, args...), LandlockedFlag)
	err := unix.Exec("/proc/self/exe", argv, os.Environ())
	return "", fmt.Errorf("confine: executing the agent again in its Landlock domain: %w", err)
}

// Landlock's file rights (ABI 1 has the first 13; REFER came with ABI 2,
// TRUNCATE with 3, IOCTL_DEV with 5) and its network right to bind a TCP
// port (ABI 4).
const (
	landlockAccessFSABI1     = 1<<13 - 1
	landlockAccessFSRefer    = 1 << 13
	landlockAccessFSTruncate = 1 << 14
	landlockAccessFSIoctlDev = 1 << 15
	landlockAccessNetBindTCP = 1 << 0
	// LandlockSignalABI is the first ABI whose signal scoping lets the
	// threads of one process signal each other whatever their domains
	// (the Go runtime preempts its threads with signals, and DenyFiles
	// puts each thread in a domain of its own).
	LandlockSignalABI = 7
)

// DenyFiles puts every thread of this process, and all it starts, in a
// Landlock domain that opens, makes, removes and runs no file and binds
// no TCP port: what a process needs that has read its files already and
// serves only on descriptors it holds (the host's end of an egress
// tunnel: a flaw in its proxy then opens no file of the user it runs
// as, the host's signing key among them). Descriptors open before stay
// usable. Landlock does not cover a file's mode, owner, attributes or
// times, a listen without a bind, nor connecting to a path's Unix
// socket: Options.Proxy's seccomp filter denies those. Where the domain also scopes (ABI 6 for abstract Unix
// sockets, LandlockSignalABI for signals), the process reaches no
// abstract socket and signals no process made outside it. A domain is a
// thread's, so each thread of the Go runtime restricts itself (threads
// made later are cloned from one inside). It returns why it did
// nothing, where the kernel has no Landlock or the runtime cannot run a
// call on every thread (a program built with cgo).
func DenyFiles() (string, error) {
	abi := LandlockABI()
	if abi < 1 {
		return "Landlock not applied: the kernel has none", nil
	}
	attr := landlockRuleset{handledAccessFS: landlockAccessFSABI1}
	if abi >= 2 {
		attr.handledAccessFS |= landlockAccessFSRefer
	}
	if abi >= 3 {
		attr.handledAccessFS |= landlockAccessFSTruncate
	}
	if abi >= 4 {
		attr.handledAccessNet = landlockAccessNetBindTCP
	}
	if abi >= 5 {
		attr.handledAccessFS |= landlockAccessFSIoctlDev
	}
	if abi >= LandlockScopeABI {
		attr.scoped = landlockScopeAbstractUnixSocket
	}
	if abi >= LandlockSignalABI {
		attr.scoped |= landlockScopeSignal
	}
	// Unprivileged, a domain needs no_new_privs, on every thread.
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		if e == unix.ENOTSUP {
			return "Landlock not applied: this program cannot run a call on all its threads (built with cgo)", nil
		}
		return "", fmt.Errorf("confine: no_new_privs: %w", e)
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return "", fmt.Errorf("confine: landlock ruleset: %w", e)
	}
	defer unix.Close(int(fd))
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return "", fmt.Errorf("confine: landlock: %w", e)
	}
	return "", nil
}
