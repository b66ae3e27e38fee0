// Package agent is the neuron side of the channel: it runs inside each
// neuron (as cmd/cortex-agent), dials the host, and executes the protocol's
// commands — exec, files confined to the neuron's root, background processes
// with replayable output, PTYs, health and shutdown.
//
// It imports only foundation packages and keeps its dependencies few: the
// agent ships inside every neuron and must stay small and static.
package agent
