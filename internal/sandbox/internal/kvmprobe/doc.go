// Package kvmprobe proves that KVM runs guests on this machine: it creates a
// VM with KVM ioctls, gives it one page of real-mode code
// (mov al,0x42; out 0x10,al; hlt), runs the vCPU and checks the two exits
// that must follow (an OUT of 0x42 to port 0x10, then HLT). Opening
// /dev/kvm is not enough: where nested virtualization is missing the device
// opens and the VM is created, but KVM_RUN never comes back.
//
// The guest runs in a child process — this program's own executable, run
// again with an environment variable that this package's init recognises —
// so a vCPU that never returns cannot leave a stuck thread in the caller:
// the child gives up on its own after its timeout, and the parent kills it
// when even that does not happen.
//
// Both microVM backends use it, each before it trusts KVM: firecracker's
// self-check and qemu's choice between KVM and TCG. It lives under
// internal/sandbox/internal so that neither backend imports the other.
//
// The package must not be used to run anything but the fixed probe guest.
package kvmprobe
