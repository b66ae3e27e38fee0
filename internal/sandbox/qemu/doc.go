// Package qemu runs each neuron as a QEMU microVM (-M microvm): its own
// guest kernel, a read-only root disk shared by every neuron, a sparse
// writable overlay disk per neuron (overlays/<id>/overlay.ext4, kept across
// destroy and create), and no network device at all. Devices sit on
// virtio-mmio.
//
// Its in-neuron half is internal/agent/vminit, the guest's PID 1
// (cortex-agent as /init of the initramfs internal/vmimage builds): it
// reads the boot.VMConfig this package writes on the config disk
// (internal/protocol/boot), mounts the disks, bridges each virtio-serial
// port to the agent, serves the control port and the guest end of the
// egress tunnel, and starts the agent (internal/agent), which confines
// itself (internal/agent/confine).
//
// QEMU runs with KVM where KVM really runs guests (a probe boots the
// kernel; opening /dev/kvm proves nothing where nested virtualization is
// missing) and with TCG, software emulation, otherwise: the neuron's log
// and the self-check say which. Under TCG a boot takes seconds, so the
// self-check is OK only with KVM and auto never picks this mode then.
//
// The channel is one virtio-serial port per host process, each a Unix
// socket QEMU listens on in the channel directory, joined to the host's
// link by a relay (relay.go). A control port (cortex.ctl) lets the host
// power the guest off cleanly and set its clock and reseed its RNG after a
// snapshot is restored. Snapshots go through QMP (snapshot.go). Network
// egress, when granted, crosses another port to the host's enforcing
// proxy (egress.go): still no network device.
//
// The lifecycle — state file, discovery, death, destroy — is the one every
// backend shares (internal/sandbox/internal/lifecycle); a neuron is its
// QEMU process.
package qemu
