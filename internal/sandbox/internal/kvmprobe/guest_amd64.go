//go:build linux && amd64

package kvmprobe

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl numbers of linux/kvm.h (x86_64).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46 // _IOW(0xAE, 0x46, 32 bytes)
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81 // _IOR(0xAE, 0x81, 144 bytes)
	kvmSetRegs             = 0x4090AE82 // _IOW(0xAE, 0x82, 144 bytes)
	kvmGetSregs            = 0x8138AE83 // _IOR(0xAE, 0x83, 312 bytes)
	kvmSetSregs            = 0x4138AE84 // _IOW(0xAE, 0x84, 312 bytes)
)

// Exit reasons (kvm_run.exit_reason) and the I/O direction out.
const (
	exitUnknown       = 0
	exitException     = 1
	exitIO            = 2
	exitHLT           = 5
	exitShutdown      = 8
	exitFailEntry     = 9
	exitInternalError = 17
	ioOut             = 1
)

var exitNames = map[uint32]string{exitUnknown: "UNKNOWN", exitException: "EXCEPTION", exitIO: "IO", exitHLT: "HLT",
	exitShutdown: "SHUTDOWN", exitFailEntry: "FAIL_ENTRY", exitInternalError: "INTERNAL_ERROR"}

// LoopIterations is how many times the guest spins before its OUT: a vCPU
// that KVM runs on the hardware does it in a few milliseconds; one that is
// emulated instruction by instruction (nested virtualization without
// VT-x/AMD-V passed through, measured at about 2 million instructions per
// second) needs seconds, and so would a Linux guest's boot ("guests hang").
const LoopIterations = 10_000_000

// guestCode runs in real mode at guestCode0:
//
//	mov ecx, LoopIterations
//	l: dec ecx
//	jnz l
//	mov al, 0x42
//	out 0x10, al
//	hlt
var guestCode = []byte{
	0x66, 0xB9, LoopIterations & 0xFF, LoopIterations >> 8 & 0xFF, LoopIterations >> 16 & 0xFF, LoopIterations >> 24,
	0x66, 0x49,
	0x75, 0xFC,
	0xB0, 0x42,
	0xE6, 0x10,
	0xF4,
}

const (
	guestMemSize = 0x10000
	guestCode0   = 0x1000
	probePort    = 0x10
	probeValue   = 0x42
)

type userspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

type regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

type segment struct {
	Base                         uint64
	Limit                        uint32
	Selector                     uint16
	Type, Present, DPL, DB, S, L uint8
	G, AVL, Unusable, Padding    uint8
}

type dtable struct {
	Base    uint64
	Limit   uint16
	Padding [3]uint16
}

type sregs struct {
	CS, DS, ES, FS, GS, SS, TR, LDT segment
	GDT, IDT                        dtable
	CR0, CR2, CR3, CR4, CR8         uint64
	EFER, APICBase                  uint64
	InterruptBitmap                 [4]uint64
}

func ioctl(fd int, req uintptr, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

// runGuest creates the VM and runs the probe guest on the calling thread
// (which the caller has locked). It returns nil when the guest did exactly
// what it must.
func runGuest(device string) *Result {
	fail := func(stage, format string, args ...any) *Result {
		return &Result{Stage: stage, Detail: fmt.Sprintf(format, args...)}
	}
	kvm, err := unix.Open(device, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open", "cannot open %s: %v", device, err)
	}
	defer unix.Close(kvm)
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fail("api-version", "KVM_GET_API_VERSION gave %d (%v), want 12", v, err)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fail("create-vm", "KVM_CREATE_VM: %v", err)
	}
	vm := int(vmfd)
	defer unix.Close(vm)
	mem, err := unix.Mmap(-1, 0, guestMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fail("memory", "mmap of guest memory: %v", err)
	}
	defer unix.Munmap(mem)
	copy(mem[guestCode0:], guestCode)
	region := userspaceMemoryRegion{MemorySize: guestMemSize, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vm, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fail("memory", "KVM_SET_USER_MEMORY_REGION: %v", err)
	}
	vcpufd, err := ioctl(vm, kvmCreateVCPU, 0)
	if err != nil {
		return fail("create-vcpu", "KVM_CREATE_VCPU: %v", err)
	}
	vcpu := int(vcpufd)
	defer unix.Close(vcpu)
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil || size < 48 {
		return fail("create-vcpu", "KVM_GET_VCPU_MMAP_SIZE gave %d (%v)", size, err)
	}
	run, err := unix.Mmap(vcpu, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("create-vcpu", "mmap of kvm_run: %v", err)
	}
	defer unix.Munmap(run)
	var sr sregs
	if _, err := ioctl(vcpu, kvmGetSregs, uintptr(unsafe.Pointer(&sr))); err != nil {
		return fail("registers", "KVM_GET_SREGS: %v", err)
	}
	sr.CS.Base, sr.CS.Selector = 0, 0
	if _, err := ioctl(vcpu, kvmSetSregs, uintptr(unsafe.Pointer(&sr))); err != nil {
		return fail("registers", "KVM_SET_SREGS: %v", err)
	}
	r := regs{RIP: guestCode0, RFLAGS: 0x2}
	if _, err := ioctl(vcpu, kvmSetRegs, uintptr(unsafe.Pointer(&r))); err != nil {
		return fail("registers", "KVM_SET_REGS: %v", err)
	}
	sawOut := false
	for i := 0; i < 4; i++ {
		if _, err := ioctl(vcpu, kvmRun, 0); err != nil {
			return fail("run", "KVM_RUN: %v", err)
		}
		reason := binary.LittleEndian.Uint32(run[8:12])
		switch reason {
		case exitIO:
			dir, width, port := run[32], run[33], binary.LittleEndian.Uint16(run[34:36])
			off := binary.LittleEndian.Uint64(run[40:48])
			if dir != ioOut || width != 1 || port != probePort || off >= uint64(len(run)) || run[off] != probeValue {
				// (a wrong value in AL would also mean the loop did not run as written)
				return fail("exit", "the guest's I/O exit is wrong: direction %d, size %d, port %#x", dir, width, port)
			}
			sawOut = true
		case exitHLT:
			if !sawOut {
				return fail("exit", "the guest halted without its OUT to port %#x", probePort)
			}
			return nil
		default:
			name := exitNames[reason]
			if name == "" {
				name = fmt.Sprint(reason)
			}
			return fail("exit", "the guest exited with KVM_EXIT_%s instead of running its code", name)
		}
	}
	return fail("exit", "the guest did not halt after its OUT")
}
