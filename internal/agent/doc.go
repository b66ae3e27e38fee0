//go:build linux

// Package agent is the neuron side of the channel: it runs inside each
// neuron (as cmd/cortex-agent), dials the host, and executes the protocol's
// commands — exec, files confined to the neuron's root, background processes
// with replayable output, PTYs, health and shutdown.
//
// It imports only foundation packages and keeps its dependencies few: the
// agent ships inside every neuron and must stay small and static.
//
// The package is Linux-only (every file is built for linux alone), as
// neurons are: it reaps as a subreaper, kills children with the parent
// death signal, and renames with RENAME_NOREPLACE.
package agent
