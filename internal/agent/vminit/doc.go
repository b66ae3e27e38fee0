// Package vminit is cortex-agent as PID 1 of a microVM neuron (QEMU's
// microvm, Firecracker), the pair of internal/agent/nsboxinit, which is
// PID 1 of a namespace sandbox: the kernel runs it as /init from the
// initramfs that internal/vmimage builds. It
//
//   - mounts devtmpfs, proc and sysfs, loads the kernel modules the
//     initramfs carries (finit_module, in modules.dep order),
//   - mounts the read-only root disk and the neuron's writable overlay
//     disk (found by their virtio serial numbers) as one overlayfs and
//     switches to it (MS_MOVE + chroot),
//   - starts the ordinary agent (this binary again, watching a channel
//     directory, exactly as in every other mode) and bridges each host
//     connection to it: every virtio-serial port named cortex.N, and vsock
//     connections from the host on boot.VMConfig.VsockPort,
//   - serves the control port (cortex.ctl, or vsock boot.VMConfig.CtlVsockPort):
//     set the clock and reseed the RNG after a snapshot is restored, power
//     off cleanly,
//   - reaps orphans and never exits: when the agent ends, it ends every
//     process, syncs the disks and resets the machine, which ends the VMM.
//
// Its contract with the host (the config disk, the disks' serial numbers,
// the port names, the control requests) is internal/protocol/boot's, which
// the host's half (internal/sandbox/qemu, internal/sandbox/firecracker,
// internal/vmimage) imports instead of this package. It imports only
// foundation packages and the standard library (the agent runs as a
// separate process).
package vminit
