// Package link is the host's end of the channel to a neuron's agent
// (DESIGN.md "The channel"; the wire is internal/protocol, the other end
// internal/agent).
//
// A Link is one neuron's channel in this host process. Usually the host
// listens — Listen binds a Unix socket in the neuron's channel directory
// (bound in a private directory and fchmod'ed before the neuron can see
// its name, then renamed in) and the agent dials it; with docker's tcp
// transport the agent listens and Dial reaches it. Every connection
// starts with the hello handshake, in which the agent proves the
// neuron's per-start secret (protocol/auth.go); a peer that cannot is
// refused (ErrNotTheAgent), so a process of the neuron posing as its agent
// never gets a request. An agent that reconnects is taken up; while none
// is connected, requests fail at once with NOT_RUNNING, never hang.
//
// A Conn is one connection: requests with ids, their responses and
// stream events multiplexed over it, raw bodies for file and output
// bytes, credit windows both ways so a slow reader stalls only its own
// stream. Client is the typed API over either (Exec, files, processes,
// PTYs, health), and what the rest of the host uses.
//
// Everything the agent answers is untrusted input (the neuron is
// hostile): sizes, counts and names are bounded and checked here or by
// the caller (internal/transfer, internal/hostfs), and a misbehaving
// agent — a frame past the caps, garbage, events past its window — is cut
// off. The host touches a neuron's files directly in two places, both by
// descriptor and only for large copies: HostView (docker and process
// mode's home) and files the agent opens and passes over a Unix socket
// (protocol.CapPassFiles; checkPassed says which the host will copy with).
//
// An Activity sees every request before it is sent and when it ends: the
// lifecycle resumes a paused neuron there and knows when one is idle.
//
// The package is Linux-first: HostView's descriptor work is Linux-only
// (hostview_linux.go), the rest is portable.
package link
