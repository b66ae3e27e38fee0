//go:build !linux

package boot

// CloseOnExec does nothing where neurons do not run.
func CloseOnExec() {}
