//go:build !amd64

package vmimage

// HostTSCkHz is only measured on amd64.
func HostTSCkHz() (int64, error) { return 0, errNoTSC }
