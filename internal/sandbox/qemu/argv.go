package qemu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// MaxPorts is the most channel ports a VM has: a virtio-serial device has
// 31, one of them the control port.
const MaxPorts = 30

// Spec is everything one QEMU command line is made of. Args turns it into
// argv; tests pin the result flag by flag.
type Spec struct {
	// Marker names the VM in -name, so this home's VMs are found among
	// the host's processes (guest=nsys-cortex:<home tag>:<id>).
	Marker string
	// KVM selects hardware virtualization; otherwise TCG (emulation).
	KVM bool
	// TSCkHz is the host's TSC frequency, passed as tsc_early_khz under
	// TCG: with ACPI on, Debian's kernel hangs calibrating it otherwise.
	TSCkHz    int64
	MemoryMiB int64
	CPUs      int
	// Kernel (ELF vmlinux), Initramfs, RootDisk (read-only ext4),
	// OverlayDisk (the neuron's writable ext4) and ConfigDisk (raw JSON).
	Kernel, Initramfs, RootDisk, OverlayDisk, ConfigDisk string
	// PortFDs are listening Unix sockets QEMU inherits for the channel's
	// virtio-serial ports cortex.0, cortex.1, ...; CtlFD for cortex.ctl;
	// QMPFD for the QMP monitor. Descriptor numbers in the child.
	PortFDs      []int
	CtlFD, QMPFD int
	// EgressFD, when set, is a connected socket for the egress tunnel's
	// port, cortex.egress (its other end is the host's enforcing proxy).
	EgressFD int
	// EgressClosed, without EgressFD, gives the VM the egress port with
	// nothing behind it: a snapshot taken with egress is restored into a
	// neuron whose policy has none (its device set must be the snapshot's;
	// what the guest sends there goes nowhere).
	EgressClosed bool
	// Incoming starts the VM paused, waiting for migrate-incoming (a
	// restore).
	Incoming bool
}

// KernelCmdline is the guest kernel's command line. It carries no secret
// (the host's argv is readable by every user): the neuron's configuration
// travels on the config disk.
func KernelCmdline(s Spec) string {
	// cryptomgr.notests: the crypto self-tests take half a second of a
	// TCG boot. psi=0: no pressure-stall accounting in every context
	// switch (nothing in the guest reads it; under TCG its code is more
	// to translate after every restore).
	args := []string{"console=ttyS0", "quiet", "reboot=t", "panic=-1", "pci=off", "nomodeset", "cryptomgr.notests", "psi=0"}
	if !s.KVM {
		// The TSC is the host's; the emulated timers lag it under load,
		// so the watchdog would swap it for jiffies (ms resolution, drift).
		// An emulated CPU does not speculate: the guest kernel's Spectre
		// mitigations (retpolines, RSB filling) would only cost time.
		args = append(args, "tsc=reliable", "tsc_early_khz="+strconv.FormatInt(s.TSCkHz, 10), "mitigations=off")
	}
	return strings.Join(args, " ")
}

// Args returns the qemu-system-x86_64 arguments (without argv[0]) for s:
// a microvm with ACPI, its devices on virtio-mmio, no network device at
// all, no default devices, QEMU's own seccomp sandbox, and -no-reboot so
// that a guest reset (how the guest powers off) ends the process.
func Args(s Spec) ([]string, error) {
	switch {
	case s.Marker == "" || strings.ContainsAny(s.Marker, ",="):
		return nil, fmt.Errorf("qemu: bad marker %q", s.Marker)
	case s.MemoryMiB < 128:
		return nil, fmt.Errorf("qemu: %d MiB of memory is too little (at least 128)", s.MemoryMiB)
	case s.CPUs < 1:
		return nil, fmt.Errorf("qemu: %d vCPUs", s.CPUs)
	case !s.KVM && s.TSCkHz <= 0:
		return nil, errors.New("qemu: TCG needs the host's TSC frequency")
	case len(s.PortFDs) == 0 || len(s.PortFDs) > MaxPorts:
		return nil, fmt.Errorf("qemu: %d channel ports (1 to %d)", len(s.PortFDs), MaxPorts)
	}
	for _, p := range []string{s.Kernel, s.Initramfs, s.RootDisk, s.OverlayDisk, s.ConfigDisk} {
		if p == "" {
			return nil, errors.New("qemu: a kernel, an initramfs and three disks are needed")
		}
	}
	accel, cpu := "tcg", "max"
	if s.KVM {
		accel, cpu = "kvm", "host"
	}
	a := []string{
		"-name", "guest=" + s.Marker,
		"-M", "microvm,acpi=on,pit=off,pic=off,rtc=on,isa-serial=on,auto-kernel-cmdline=off",
		"-accel", accel, "-cpu", cpu,
		"-m", strconv.FormatInt(s.MemoryMiB, 10) + "M", "-smp", strconv.Itoa(s.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-nic", "none",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-kernel", s.Kernel, "-initrd", s.Initramfs, "-append", KernelCmdline(s),
	}
	disk := func(id, path, opts, serial string) {
		a = append(a, "-drive", "id="+id+",file="+optEscape(path)+",format=raw,if=none"+opts,
			"-device", "virtio-blk-device,drive="+id+",serial="+serial)
	}
	disk("root", s.RootDisk, ",readonly=on", boot.SerialRoot)
	disk("overlay", s.OverlayDisk, ",discard=unmap,detect-zeroes=unmap", boot.SerialOverlay)
	disk("config", s.ConfigDisk, ",readonly=on", boot.SerialConfig)
	a = append(a, "-device", "virtio-serial-device")
	port := func(id string, fd int, name string) {
		a = append(a, "-chardev", fmt.Sprintf("socket,id=%s,fd=%d,server=on,wait=off", id, fd),
			"-device", "virtserialport,chardev="+id+",name="+name)
	}
	for i, fd := range s.PortFDs {
		port(fmt.Sprintf("port%d", i), fd, fmt.Sprintf("%s%d", boot.PortPrefix, i))
	}
	port("ctl", s.CtlFD, boot.CtlPort)
	switch {
	case s.EgressFD > 0:
		a = append(a, "-chardev", fmt.Sprintf("socket,id=egress,fd=%d", s.EgressFD),
			"-device", "virtserialport,chardev=egress,name="+boot.EgressPort)
	case s.EgressClosed:
		a = append(a, "-chardev", "null,id=egress", "-device", "virtserialport,chardev=egress,name="+boot.EgressPort)
	}
	a = append(a, "-chardev", fmt.Sprintf("socket,id=qmp,fd=%d,server=on,wait=off", s.QMPFD), "-mon", "chardev=qmp,mode=control")
	if s.Incoming {
		a = append(a, "-incoming", "defer")
	}
	return a, nil
}

// optEscape escapes a value inside QEMU's comma-separated options.
func optEscape(v string) string { return strings.ReplaceAll(v, ",", ",,") }
