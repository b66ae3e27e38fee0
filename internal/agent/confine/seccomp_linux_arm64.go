package confine

import "golang.org/x/sys/unix"

// nativeArch is the seccomp architecture of this build.
const nativeArch = unix.AUDIT_ARCH_AARCH64

// x32Bit: arm64 has no second ABI numbering.
const x32Bit = 0

// deniedHere are the denied calls only this architecture has.
var deniedHere = map[string]uint32{}

// proxyDeniedHere are the calls of Options.Proxy only this architecture
// has: none.
var proxyDeniedHere = map[string]uint32{}
