package vmimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctls (linux/kvm.h).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	kvmExitIO  = 2
	kvmExitHLT = 5
)

// probeCode is real-mode code at guestAddr: mov al, 42; out 0x10, al; hlt.
var probeCode = []byte{0xB0, 0x2A, 0xE6, 0x10, 0xF4}

const guestAddr = 0x1000

// ProbeKVM proves that KVM runs guests here: it creates a VM with one
// vCPU, runs a few real-mode instructions (an OUT to a port, then HLT) and
// checks what came out. Opening /dev/kvm is not enough: where nested
// virtualization is missing, or KVM is emulated, a vCPU may never run (it
// hangs), and that is what timeout catches. The error says what failed.
func ProbeKVM(timeout time.Duration) error {
	kvm, err := os.OpenFile("/dev/kvm", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("KVM: %w", err)
	}
	defer kvm.Close()
	if v, err := ioctl(kvm.Fd(), kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fmt.Errorf("KVM: API version %d, %v (want 12)", v, err)
	}
	vmfd, err := ioctl(kvm.Fd(), kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("KVM: creating a VM: %w", err)
	}
	vm := os.NewFile(vmfd, "kvm-vm")
	defer vm.Close()
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("KVM: guest memory: %w", err)
	}
	defer unix.Munmap(mem)
	copy(mem, probeCode)
	// struct kvm_userspace_memory_region { u32 slot, flags; u64 guest_phys_addr, memory_size, userspace_addr; }
	region := make([]byte, 32)
	binary.NativeEndian.PutUint64(region[8:], guestAddr)
	binary.NativeEndian.PutUint64(region[16:], 4096)
	binary.NativeEndian.PutUint64(region[24:], uint64(uintptr(unsafe.Pointer(&mem[0]))))
	if _, err := ioctlPtr(vm.Fd(), kvmSetUserMemoryRegion, unsafe.Pointer(&region[0])); err != nil {
		return fmt.Errorf("KVM: mapping guest memory: %w", err)
	}
	cpufd, err := ioctl(vm.Fd(), kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("KVM: creating a vCPU: %w", err)
	}
	cpu := os.NewFile(cpufd, "kvm-vcpu")
	defer cpu.Close()
	size, err := ioctl(kvm.Fd(), kvmGetVCPUMmapSize, 0)
	if err != nil || size < 64 {
		return fmt.Errorf("KVM: vCPU area size %d: %v", size, err)
	}
	run, err := unix.Mmap(int(cpufd), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("KVM: mapping the vCPU: %w", err)
	}
	defer unix.Munmap(run)
	// Real mode with CS at 0, starting at guestAddr.
	sregs := make([]byte, 312)
	if _, err := ioctlPtr(cpu.Fd(), kvmGetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return fmt.Errorf("KVM: reading segment registers: %w", err)
	}
	binary.NativeEndian.PutUint64(sregs[0:], 0)  // cs.base
	binary.NativeEndian.PutUint16(sregs[12:], 0) // cs.selector
	if _, err := ioctlPtr(cpu.Fd(), kvmSetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return fmt.Errorf("KVM: setting segment registers: %w", err)
	}
	regs := make([]byte, 144) // struct kvm_regs: rax ... r15, rip, rflags
	binary.NativeEndian.PutUint64(regs[128:], guestAddr)
	binary.NativeEndian.PutUint64(regs[136:], 2)
	if _, err := ioctlPtr(cpu.Fd(), kvmSetRegs, unsafe.Pointer(&regs[0])); err != nil {
		return fmt.Errorf("KVM: setting registers: %w", err)
	}
	out, err := runVCPU(cpu.Fd(), run, timeout)
	if err != nil {
		return err
	}
	// struct kvm_run: exit_reason at 8; io at 32 {u8 direction, size; u16 port; u32 count; u64 data_offset}.
	if reason := binary.NativeEndian.Uint32(out[8:]); reason != kvmExitIO {
		return fmt.Errorf("KVM: the guest's OUT exited with reason %d, want %d (I/O)", reason, kvmExitIO)
	}
	port := binary.NativeEndian.Uint16(out[34:])
	off := binary.NativeEndian.Uint64(out[40:])
	if port != 0x10 || off >= uint64(len(out)) || out[off] != 0x2A {
		return fmt.Errorf("KVM: the guest wrote to port %#x, not 42 to 0x10", port)
	}
	out, err = runVCPU(cpu.Fd(), run, timeout)
	if err != nil {
		return err
	}
	if reason := binary.NativeEndian.Uint32(out[8:]); reason != kvmExitHLT {
		return fmt.Errorf("KVM: the guest's HLT exited with reason %d, want %d", reason, kvmExitHLT)
	}
	return nil
}

// runVCPU runs the vCPU once on a thread of its own, at most timeout: a
// vCPU that never exits is kicked out with a signal (immediate_exit set
// first, so it cannot re-enter). It returns a copy of the run area. A
// vCPU that not even a signal gets out of the kernel keeps its thread
// blocked there (nothing can end it); the error says so.
func runVCPU(fd uintptr, run []byte, timeout time.Duration) ([]byte, error) {
	started := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread is signalled; it dies with the goroutine
		started <- unix.Gettid()
		_, err := ioctl(fd, kvmRun, 0)
		done <- err
	}()
	tid := <-started
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("KVM: running the vCPU: %w", err)
		}
		return append([]byte(nil), run...), nil
	case <-time.After(timeout):
	}
	run[1] = 1 // immediate_exit
	for i := 0; i < 50; i++ {
		unix.Tgkill(unix.Getpid(), tid, unix.SIGURG) // the runtime's own preemption signal: harmless
		select {
		case <-done:
			return nil, fmt.Errorf("KVM: the vCPU ran no instruction within %s (a guest would hang here: no working hardware virtualization)", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("KVM: the vCPU is stuck in the kernel after %s (a guest would hang here)", timeout)
}

func ioctl(fd, req, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

func ioctlPtr(fd, req uintptr, p unsafe.Pointer) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(p))
	if e != 0 {
		return 0, e
	}
	return r, nil
}

var errNoTSC = errors.New("the TSC frequency is only measured on amd64")
