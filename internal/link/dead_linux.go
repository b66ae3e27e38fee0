package link

import "golang.org/x/sys/unix"

// setUserTimeout sets TCP_USER_TIMEOUT on socket fd: the connection ends
// when what it sent (data or keepalive probes) goes unacknowledged for
// ms milliseconds.
func setUserTimeout(fd, ms int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
}
