// Package allowlist is the syntax and meaning of a neuron's network egress
// allow-list: names, wildcards, addresses and networks, each with an
// optional port (ParseRule), and which destinations a parsed list lets
// through (List.NameAllowed, List.AddrAllowed, Public).
//
// Both ends use it: the host validates the list a create asks for
// (internal/sandbox), and the neuron's side enforces it (the proxy of
// internal/agent/egress, run by nsbox's PID 1 and by the host end of a
// VM's egress tunnel). Keeping one copy here means a list the host accepts
// is exactly a list the neuron enforces.
//
// It is a foundation package: standard library only.
package allowlist
