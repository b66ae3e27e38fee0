package boot

import (
	"os"
	"strconv"
	"syscall"
)

// sysCloseRange is close_range(2)'s number on every Linux architecture
// (the generic table), which the syscall package does not name.
const sysCloseRange = 436

// closeRangeCloexec is CLOSE_RANGE_CLOEXEC: mark, do not close.
const closeRangeCloexec = 4

// CloseOnExec marks every descriptor from 3 up close-on-exec. What the
// process inherited (a shell's `exec 7<secret`) or opened without
// O_CLOEXEC (a FUSE device) then reaches no program it starts: a child gets
// only what it is handed (exec.Cmd's ExtraFiles), whatever started this
// process. The process itself keeps using them. Every host process that
// starts neurons calls it first, and again before it starts one; so does
// every neuron-side process (the agent, its PID 1s) before it starts
// anything.
func CloseOnExec() {
	if _, _, e := syscall.Syscall(sysCloseRange, 3, ^uintptr(0), closeRangeCloexec); e == 0 {
		return
	}
	// Kernels before 5.11: one at a time.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
