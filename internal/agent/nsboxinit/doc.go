// Package nsboxinit is cortex-agent as PID 1 of a namespace sandbox
// neuron (nsbox; `cortex-agent init`), the pair of internal/agent/vminit,
// which is PID 1 of a microVM neuron. Init
//
//   - reads the host's boot.NsboxConfig (internal/protocol/boot) from a
//     descriptor,
//   - builds the neuron's root (overlays, binds, /proc, a minimal /dev, a
//     private /tmp), reaching every mount point by descriptor without
//     following a link, and pivots into it,
//   - with network egress, keeps the host's network namespace for itself
//     and serves the enforcing proxy (confine.EgressPlan) on the loopback
//     of a new one that everything else in the neuron gets,
//   - starts the agent in a nested user namespace as an unprivileged user
//     once the host says the sandbox is in its cgroups, hands it its
//     secret on a descriptor, restarts it if something kills it, and reaps
//     orphans until it exits.
//
// Probe and ProbeNetwork are nsbox's self-checks. The agent's own
// confinement (seccomp, Landlock) is internal/agent/confine's, shared with
// the other modes.
//
// Like the rest of the agent it imports only foundation packages.
package nsboxinit
