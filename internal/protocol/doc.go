// Package protocol is the wire format between the host (cortex) and the agent
// inside a neuron: length-prefixed frames with a JSON header and a raw body,
// the hello handshake, the commands with their arguments and results, and the
// closed set of error codes. See docs/protocol.md.
//
// It also holds the two small primitives both ends share: a FrameWriter that
// serialises frames onto a connection, and the Credit of a stream's flow
// control. It is a foundation package: standard library only.
package protocol
