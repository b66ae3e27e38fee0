// Package egress enforces a neuron's network allow-list (whose syntax and
// meaning are internal/protocol/allowlist's): an HTTP proxy that lets
// through only what the list allows, and a resolver that looks names up
// the way the host does from a copy taken before the neuron could change
// the files it reads.
//
// nsbox runs the proxy in the neuron's first process, which stays in the
// host's network namespace while everything else in the neuron gets one
// with only a loopback; the proxy listens on that loopback. So there is no
// route out except through it, whatever a program in the neuron does with
// its proxy variables.
//
// Like the rest of the agent it imports only foundation packages.
package egress
