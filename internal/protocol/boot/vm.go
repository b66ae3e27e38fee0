package boot

import (
	"bufio"
	"bytes"
	"fmt"
	"time"
)

// The microVM contract (QEMU's microvm, Firecracker): the kernel runs the
// agent as VMInitPath from the initramfs internal/vmimage builds, as PID 1
// (vminit.Main, internal/agent/vminit). It finds its disks by their
// serial numbers, reads a VMConfig from the config disk, and serves the
// host's connections and control requests on the ports named here.

// VMInitPath is where the initramfs holds the agent: the kernel runs it as
// PID 1 with no arguments.
const VMInitPath = "/init"

// VMModulesDir holds the initramfs's kernel modules, loaded in the lexical
// order of their names (the builder numbers them) before the disks are
// mounted; those in VMLaterModulesDir are loaded once the agent runs, in
// the background (vsock: only Firecracker has the device).
const (
	VMModulesDir      = "/modules"
	VMLaterModulesDir = "/modules/later"
)

// Virtio-blk serial numbers of the disks (QEMU's serial=, Firecracker's
// drive_id). Without serials the guest takes vda, vdb, vdc in that order.
const (
	SerialRoot    = "cortex-root"
	SerialOverlay = "cortex-overlay"
	SerialConfig  = "cortex-config"
)

// PortReady is what PID 1 writes on a virtio-serial channel port once
// the agent is connected for the host that opened it, before any byte of
// the channel: the host (which cannot tell a booting guest from a silent
// one) starts its hello then, and the agent answers it.
const PortReady = "cortex-agent ready\n"

// Virtio-serial port names: PortPrefix+"0", +"1", ... carry one host
// connection each; CtlPort is the control port.
const (
	PortPrefix = "cortex."
	CtlPort    = "cortex.ctl"
	// EgressPort carries the egress tunnel (internal/agent/egress's
	// GuestTunnel) when the neuron has network egress.
	EgressPort = "cortex.egress"
)

// Default vsock ports (Firecracker's channel): the agent and the control
// port. A host connects to them through Firecracker's hybrid vsock
// ("CONNECT 1024\n").
const (
	DefaultVsockPort    = 1024
	DefaultCtlVsockPort = 1025
	// DefaultEgressVsockPort is the host's port the guest dials for the
	// egress tunnel (Firecracker passes it to <uds_path>_1026 on the host).
	DefaultEgressVsockPort = 1026
)

// The host's end of a VM's egress tunnel is `cortex-agent egress-tunnel
// [--uid U --gid G] [--listen PATH --pid VMM] -- RULE...` (confine.EgressTunnel,
// run on the host): without --listen it finds its stream on descriptor
// EgressTunnelFD, one end of a socket pair whose other end the VMM holds.
const EgressTunnelFD = 3

// VMChannelDir is the agent's channel directory inside the guest; the bridge
// places one socket per host connection there.
const VMChannelDir = "/run/cortex/channel"

// VMConfigMax bounds the config disk's JSON.
const VMConfigMax = 1 << 20

// VMConfig is what the host tells the guest, as JSON on the config disk
// (NUL-padded to whole sectors). It never goes on the kernel command line,
// which every user of the host can read in the VMM's argv.
type VMConfig struct {
	// Version is the boot contract's version the host wrote it in ("" is
	// 1.0; see EncodeVMConfig). The guest reads it with DecodeVMConfig.
	Version string `json:"version,omitempty"`
	// ID is the neuron id: the agent announces it, and it is the hostname.
	ID string `json:"id"`
	// Workdir is the agent's working directory (made if missing).
	Workdir string `json:"workdir"`
	// Env is the agent's whole environment (KEY=VALUE), which its
	// commands inherit.
	Env []string `json:"env"`
	// Pids caps the processes of the agent and everything it starts (a
	// cgroup's pids.max); 0 is no cap.
	Pids int `json:"pids,omitempty"`
	// NestedUserns lets programs create user namespaces (inner sandboxes);
	// without it user.max_user_namespaces is 0.
	NestedUserns bool `json:"nestedUserns,omitempty"`
	// Egress, when set, is the loopback address PID 1 listens on for the
	// guest's proxy connections and carries them to the host's enforcing
	// proxy over the EgressPort (the guest has no network device).
	Egress string `json:"egress,omitempty"`
	// EgressVsockPort, when set, carries the egress tunnel over vsock, on
	// a connection the guest makes to the host's port (Firecracker), not
	// over the EgressPort (QEMU).
	EgressVsockPort int `json:"egressVsockPort,omitempty"`
	// VsockPort and CtlVsockPort are where the guest listens for the
	// host's vsock connections; 0 takes the defaults, -1 turns one off.
	VsockPort    int `json:"vsockPort,omitempty"`
	CtlVsockPort int `json:"ctlVsockPort,omitempty"`
	// Ports is how many channel ports (virtio-serial, PortPrefix+N) the
	// machine has: PID 1 looks for them as they appear at boot, and stops
	// looking once it has them all. -1: none (vsock only); 0: unknown,
	// looked for as long as the guest runs.
	Ports int `json:"ports,omitempty"`
	// Secret is the neuron's per-start secret: PID 1 hands it to the agent
	// on a descriptor, and the agent proves it to every host.
	Secret string `json:"secret,omitempty"`
	// Root runs the agent, and so every command, as the guest's root — the
	// policy's explicit grant. Without it they run as the unprivileged
	// VMAgentUID, and guest root is PID 1 alone: nothing a command does can
	// reach the agent's memory, the channel's devices or the config disk.
	Root bool `json:"root,omitempty"`
}

// The unprivileged guest user the agent and its commands run as.
const (
	VMAgentUID  = 1000
	VMAgentGID  = 1000
	VMAgentUser = "agent"
	VMAgentHome = "/home/agent"
)

// Control operations.
const (
	// OpRestored: a snapshot was just restored. The guest sets its clock —
	// moves it on by Advance (how long the machine was stopped) when the
	// host knows that, else to Time — and mixes Seed into its RNG, then
	// reseeds it, so no two restores of one snapshot share randomness or
	// a stale clock; and it ends every channel session, so each host
	// starts afresh with a hello. Advance is exact however late the
	// guest reads the request; Time is that late.
	OpRestored = "restored"
	// OpClock sets the guest's clock to Time. The host follows OpRestored
	// with it while the guest's answer shows a skew: a guest just resumed
	// under TCG takes a while to read its first request, and the time in
	// it is that old by then.
	OpClock = "clock"
	// OpPoweroff: end every process, sync the disks, reset the machine.
	OpPoweroff = "poweroff"
	// OpPing answers with the guest's clock.
	OpPing = "ping"
)

// CtlRequest is one line of JSON the host writes on the control port.
type CtlRequest struct {
	Op   string    `json:"op"`
	Time time.Time `json:"time,omitzero"`
	Seed []byte    `json:"seed,omitempty"`
	// Advance (OpRestored): the time between the snapshot's stop and
	// the restored machine's start.
	Advance time.Duration `json:"advanceNs,omitempty"`
	// Rebind (OpRestored), when set, is the identity the restored machine
	// takes: a snapshot restored under another id than its own (a fork)
	// serves that id, with a secret of its own.
	Rebind *Rebind `json:"rebind,omitempty"`
}

// CtlReply is the guest's answer, one line of JSON.
type CtlReply struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Time  time.Time `json:"time"` // the guest's clock when it answered
}

// MaxCtlLine bounds one line of the control port, each way: a guest is
// hostile, and an answer without end must not fill the host's memory.
const MaxCtlLine = 64 << 10

// ReadCtlLine reads one line of the control port from r, at most
// MaxCtlLine bytes.
func ReadCtlLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > MaxCtlLine {
			return nil, fmt.Errorf("a control line longer than %d bytes", MaxCtlLine)
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
}
