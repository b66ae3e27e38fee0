//go:build !linux

package link

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not: keepalive
// alone ends a dead peer's connection there.
func setUserTimeout(fd, ms int) error { return nil }
