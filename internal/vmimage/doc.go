// Package vmimage builds what a microVM neuron boots, for every VMM that
// boots one (the qemu backend here, firecracker beside it):
//
//	vmlinux         the ELF kernel, unpacked from Debian's linux-image-amd64
//	                bzImage (its XZ payload: BCJ x86 + LZMA2); QEMU boots it
//	                through PVH, Firecracker directly
//	initramfs.cpio  a newc archive: the static cortex-agent as /init and the
//	                kernel modules the guest needs, in modules.dep order,
//	                decompressed and with their signatures stripped
//	rootfs.ext4     the read-only root disk, made with `mkfs.ext4 -d` from a
//	                root filesystem directory (internal/image builds one):
//	                no loop mounts, no root needed
//
// and, per neuron, a sparse writable ext4 overlay disk and a small raw
// config disk the guest's PID 1 (internal/agent/vminit) reads.
//
// It also measures the host's TSC frequency (a TCG guest with ACPI needs
// tsc_early_khz). Whether KVM really runs a guest is the backends' probe
// (internal/sandbox/internal/kvmprobe).
//
// It must not start VMs or know any backend: backends import it.
package vmimage
