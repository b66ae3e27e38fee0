// Package boot is the contract between the host and a neuron's first
// process: what the host hands the neuron's PID 1 before any channel
// exists, and how that PID 1 (or the host itself) starts the agent.
//
//	nsbox.go    nsbox: NsboxConfig on a descriptor of `cortex-agent init`
//	vm.go       microVMs (qemu, firecracker): VMConfig on the config disk,
//	            the disks' serial numbers, the channel and control ports,
//	            and the control requests the host sends after a restore
//	agent.go    the agent's flags every mode starts it with
//	version.go  the contract's version; how both configs are read
//
// The two PID-1 halves live in the neuron side (internal/agent); the host
// halves are the backends (internal/sandbox/nsbox, qemu, firecracker). Both
// import this package and nothing of each other. The egress allow-list a
// config carries has its syntax in internal/protocol/allowlist.
//
// Both configs carry the boot contract's version (version.go) and are read
// tolerantly within a major version, as the channel's messages are; see
// docs/protocol.md, "Boot configuration".
//
// It is a foundation package: the standard library and internal/protocol
// only.
package boot
