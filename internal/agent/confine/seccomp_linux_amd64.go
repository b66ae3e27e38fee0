package confine

import "golang.org/x/sys/unix"

// nativeArch is the seccomp architecture of this build.
const nativeArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks the numbers of the x32 ABI.
const x32Bit = 0x40000000

// deniedHere are the denied calls only this architecture has.
var deniedHere = map[string]uint32{"iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM}

// proxyDeniedHere are the calls of Options.Proxy only this architecture
// has (the older spellings of proxyDenied's).
var proxyDeniedHere = map[string]uint32{"chmod": unix.SYS_CHMOD, "chown": unix.SYS_CHOWN, "lchown": unix.SYS_LCHOWN,
	"utime": unix.SYS_UTIME, "utimes": unix.SYS_UTIMES, "futimesat": unix.SYS_FUTIMESAT}
