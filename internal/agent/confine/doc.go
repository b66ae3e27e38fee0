// Package confine is the neuron side of the namespace sandbox (nsbox): Init
// runs as PID 1 of a new set of namespaces, builds the neuron's root
// (overlays, binds, /proc, a minimal /dev, private /tmp), pivots into it and
// starts the agent in a nested user namespace as an unprivileged user;
// Apply is what that agent calls first: no_new_privs, a seccomp filter, and
// Landlock where the kernel has it.
//
// Like the rest of the agent it imports only foundation packages.
package confine
