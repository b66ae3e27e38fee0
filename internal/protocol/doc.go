// Package protocol is the wire format between the host (cortex) and the agent
// inside a neuron: length-prefixed frames with a JSON header and a raw body,
// the hello handshake, the commands with their arguments and results, and the
// closed set of error codes. See docs/protocol.md.
//
// It is a foundation package: it imports only the standard library and holds
// no connection state.
package protocol
