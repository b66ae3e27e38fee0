// Package confine is how a neuron is confined from inside, in every mode
// that confines: Apply is what the agent calls first (no_new_privs, a
// seccomp filter, and Landlock where the kernel has it, entered with
// EnterLandlock); EgressPlan is the enforcing egress proxy as nsbox's PID 1
// runs it, and EgressTunnel (`cortex-agent egress-tunnel`) the same proxy
// at the host's end of a microVM's egress tunnel. It also holds the little
// both PID 1s (internal/agent/nsboxinit, internal/agent/vminit) do alike.
//
// Like the rest of the agent it imports only foundation packages.
package confine
