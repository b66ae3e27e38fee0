package ctxsource

import (
	"context"

	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// Gate is /ctx's side of the host's one gate: every command written to the
// mount is asked about as the action it is, by the operator or by the
// neuron itself, before the Controller carries it out.
type Gate struct{ g *gate.Gate }

var _ ctxfs.Gate = Gate{}

// NewGate returns the gate of /ctx over lay, recording facts in audit.
func NewGate(lay layout.Layout, audit gate.Auditor) Gate {
	return Gate{g: &gate.Gate{Audit: audit, Layout: lay}}
}

// Authorize implements ctxfs.Gate.
func (g Gate) Authorize(ctx context.Context, operator bool, c *ctxfs.Command) error {
	p := gate.Principal{Kind: gate.Neuron, Name: c.Neuron}
	if operator {
		p = gate.Principal{Kind: gate.Operator}
	}
	return g.g.Allow(ctx, &gate.Request{Principal: p, Neuron: c.Neuron, Action: ctlAction(c), Detail: c.Verb + " " + c.Arg}, nil)
}

// ctlAction is the gate's name for a /ctx command.
func ctlAction(c *ctxfs.Command) gate.Action {
	switch c.Target {
	case ctxfs.TargetNeuron:
		switch c.Verb {
		case "stop":
			return gate.Destroy
		case "restart":
			return gate.Restart
		case "snapshot":
			return gate.SnapshotCreate
		case "kill":
			return gate.ProcessSignal
		case "pause":
			return gate.Pause
		case "resume":
			return gate.Resume
		}
	case ctxfs.TargetProcess:
		return gate.ProcessSignal
	case ctxfs.TargetTerminal:
		if c.Verb == "input" {
			return gate.TerminalInput
		}
		return gate.TerminalControl
	}
	return gate.Action("ctx." + c.Verb) // unknown: the gate refuses it
}
