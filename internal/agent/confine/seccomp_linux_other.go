//go:build linux && !amd64 && !arm64

package confine

// No filter is written for this architecture: Apply refuses, so a
// sandbox that asks for confinement does not start unconfined.
const nativeArch = 0

const x32Bit = 0

var deniedHere = map[string]uint32{}

var proxyDeniedHere = map[string]uint32{}
