package qemu

import (
	"slices"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

func spec() Spec {
	return Spec{Marker: "nsys-cortex:0badcafe:n1", TSCkHz: 2800000, MemoryMiB: 512, CPUs: 2,
		Kernel: "/b/vmlinux", Initramfs: "/b/initramfs.cpio", RootDisk: "/b/rootfs.ext4",
		OverlayDisk: "/o/n1/overlay.ext4", ConfigDisk: "/s/n1/config.img", PortFDs: []int{3, 4}, CtlFD: 5, QMPFD: 6}
}

// flags returns the value after each occurrence of name.
func flags(args []string, name string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			out = append(out, args[i+1])
		}
	}
	return out
}

// TestArgs pins the command line: each item is part of the boundary.
func TestArgs(t *testing.T) {
	args, err := Args(spec())
	if err != nil {
		t.Fatal(err)
	}
	one := func(name, want string) {
		t.Helper()
		if got := flags(args, name); len(got) != 1 || got[0] != want {
			t.Errorf("%s %v, want %q", name, got, want)
		}
	}
	one("-name", "guest=nsys-cortex:0badcafe:n1")
	one("-M", "microvm,acpi=on,pit=off,pic=off,rtc=on,isa-serial=on,auto-kernel-cmdline=off")
	one("-accel", "tcg")
	one("-cpu", "max")
	one("-m", "512M")
	one("-smp", "2")
	one("-nic", "none") // no network device at all
	one("-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
	one("-kernel", "/b/vmlinux")
	one("-initrd", "/b/initramfs.cpio")
	one("-mon", "chardev=qmp,mode=control")
	for _, f := range []string{"-nodefaults", "-no-user-config", "-no-reboot"} {
		if !slices.Contains(args, f) {
			t.Errorf("%s missing", f)
		}
	}
	if slices.Contains(args, "-incoming") {
		t.Error("-incoming without a restore")
	}
	wantDrives := []string{
		"id=root,file=/b/rootfs.ext4,format=raw,if=none,readonly=on",
		"id=overlay,file=/o/n1/overlay.ext4,format=raw,if=none,discard=unmap,detect-zeroes=unmap",
		"id=config,file=/s/n1/config.img,format=raw,if=none,readonly=on",
	}
	if got := flags(args, "-drive"); !slices.Equal(got, wantDrives) {
		t.Errorf("drives %q", got)
	}
	wantDevices := []string{
		"virtio-blk-device,drive=root,serial=cortex-root",
		"virtio-blk-device,drive=overlay,serial=cortex-overlay",
		"virtio-blk-device,drive=config,serial=cortex-config",
		"virtio-serial-device",
		"virtserialport,chardev=port0,name=cortex.0",
		"virtserialport,chardev=port1,name=cortex.1",
		"virtserialport,chardev=ctl,name=cortex.ctl",
	}
	if got := flags(args, "-device"); !slices.Equal(got, wantDevices) {
		t.Errorf("devices %q", got)
	}
	wantChardevs := []string{
		"stdio,id=console,signal=off",
		"socket,id=port0,fd=3,server=on,wait=off",
		"socket,id=port1,fd=4,server=on,wait=off",
		"socket,id=ctl,fd=5,server=on,wait=off",
		"socket,id=qmp,fd=6,server=on,wait=off",
	}
	if got := flags(args, "-chardev"); !slices.Equal(got, wantChardevs) {
		t.Errorf("chardevs %q", got)
	}
	cmdline := flags(args, "-append")[0]
	for _, want := range []string{"console=ttyS0", "panic=-1", "reboot=t", "tsc_early_khz=2800000", "tsc=reliable", "cryptomgr.notests", "psi=0", "mitigations=off"} {
		if !slices.Contains(strings.Fields(cmdline), want) {
			t.Errorf("kernel command line %q lacks %s", cmdline, want)
		}
	}
}

func TestArgsKVMAndRestore(t *testing.T) {
	s := spec()
	s.KVM, s.TSCkHz, s.Incoming = true, 0, true
	s.OverlayDisk = "/o/a,b/overlay.ext4"
	args, err := Args(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := flags(args, "-accel"); got[0] != "kvm" || flags(args, "-cpu")[0] != "host" {
		t.Errorf("kvm: %v %v", got, flags(args, "-cpu"))
	}
	if a := flags(args, "-append")[0]; strings.Contains(a, "tsc") || strings.Contains(a, "mitigations") {
		t.Errorf("TCG's parameters under KVM: %q", a)
	}
	if got := flags(args, "-incoming"); len(got) != 1 || got[0] != "defer" {
		t.Errorf("-incoming %v", got)
	}
	// A comma in a path is doubled, or QEMU would split the option there.
	if got := flags(args, "-drive")[1]; !strings.Contains(got, "file=/o/a,,b/overlay.ext4,") {
		t.Errorf("drive %q", got)
	}
}

func TestArgsRefuses(t *testing.T) {
	for name, mod := range map[string]func(*Spec){
		"marker":       func(s *Spec) { s.Marker = "a,b" },
		"memory":       func(s *Spec) { s.MemoryMiB = 64 },
		"cpus":         func(s *Spec) { s.CPUs = 0 },
		"tcg sans tsc": func(s *Spec) { s.TSCkHz = 0 },
		"no port":      func(s *Spec) { s.PortFDs = nil },
		"many ports":   func(s *Spec) { s.PortFDs = make([]int, MaxPorts+1) },
		"no kernel":    func(s *Spec) { s.Kernel = "" },
		"no overlay":   func(s *Spec) { s.OverlayDisk = "" },
	} {
		s := spec()
		mod(&s)
		if _, err := Args(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A snapshot's egress port with nothing behind it: the same device, a null
// backend.
func TestArgsEgressClosed(t *testing.T) {
	s := spec()
	s.EgressClosed = true
	a, err := Args(s)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(a, " ")
	if !strings.Contains(got, "-chardev null,id=egress -device virtserialport,chardev=egress,name="+boot.EgressPort) {
		t.Errorf("args: %s", got)
	}
}
