// Package firecracker runs each neuron as a Firecracker microVM under
// Firecracker's jailer: its own guest kernel, hardware isolation through
// KVM, a read-only root disk shared by all neurons, a sparse ext4 overlay
// disk of its own that persists, and VM snapshots. See docs/firecracker.md.
//
// Its in-neuron half is internal/agent/vminit, the guest's PID 1 (shared
// with qemu mode): it reads the boot.VMConfig on the config disk
// (internal/protocol/boot), mounts the disks, serves the agent's and the
// control vsock ports and dials the host for egress, and starts the agent
// (internal/agent), which confines itself (internal/agent/confine).
//
// The pieces, each tested on its own:
//
//   - api.go: a small REST client of the Firecracker API over its Unix
//     socket, typed requests of the pinned release (PinnedVersion;
//     testdata/firecracker.yaml is its API description, and the tests hold
//     every request the client sends to it), errors from fault_message.
//   - jailer.go: the jailer's command line, built by one pure function
//     (JailerArgs) that the tests pin flag by flag; stage.go puts the
//     kernel, initramfs and disks into the jail (hard links, never a shared
//     file the jail could change) and removes the jail when the neuron goes.
//   - bootargs.go: the guest's kernel command line (BootArgs); guest.go:
//     the image's contract (internal/agent/vminit): disks by serial
//     number, the config disk that carries the neuron's id, environment
//     and limits, and the control port.
//   - vsock/: the host side of hybrid vsock (CONNECT <port> / OK, retried
//     while the guest is not listening; <uds>_<port> for the other way).
//   - bridge.go: the channel: the lifecycle's link, fed by a bridge that
//     dials the agent through the VM's vsock and dials again after every
//     snapshot, restore or restart.
//   - snapshot.go, resync.go: pause, snapshot, copy the overlay, resume;
//     restore into a fresh Firecracker, then set the guest's clock and
//     reseed its RNG through the control port.
//   - check.go (with internal/sandbox/internal/kvmprobe, which qemu mode
//     shares): the self-check. KVM must run a real guest at
//     hardware speed (not merely open), and the firecracker and jailer
//     binaries, root, cgroup v2 and the guest image must be there; without
//     them Create refuses, naming what is missing.
//
// Neurons have no network interface: none is ever configured, and a VM's
// Firecracker runs in an empty network namespace. Egress, when a policy
// grants it, is a tunnel over vsock to the host's enforcing proxy
// (egress.go); full network fails the create.
//
// The package must not bridge a VM to the host's network, give a jail
// write access to anything shared between neurons, or run Firecracker
// outside its jailer.
package firecracker
