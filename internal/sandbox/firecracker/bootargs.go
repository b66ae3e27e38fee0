package firecracker

import "strings"

// BootSpec is what goes on a neuron's kernel command line. Nothing of the
// neuron does: who it is, its environment and its limits travel on its
// config disk (guest.go), which only the VM reads.
type BootSpec struct {
	// Console gives the guest a serial console (ttyS0).
	Console bool
}

// BootArgs is the guest kernel's command line. It always replaces
// Firecracker's default one, which says nomodule (the initramfs loads
// virtio and ext4 modules). No acpi=off: Firecracker describes the
// virtio-mmio devices in ACPI tables, and the modules bind through them.
// pci=off: there is no PCI bus. reboot=k and panic=1: a panicking guest,
// or one powered off, resets, which ends the Firecracker process (and the
// neuron) at once.
func BootArgs(b BootSpec) string {
	args := []string{"reboot=k", "panic=1", "pci=off", "i8042.noaux", "i8042.nomux", "i8042.nopnp", "i8042.dumbkbd"}
	if b.Console {
		args = append(args, "console=ttyS0", "quiet")
	} else {
		args = append(args, "8250.nr_uarts=0", "quiet")
	}
	return strings.Join(args, " ")
}
