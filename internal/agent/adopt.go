package agent

import (
	"slices"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// adoption is the neuron a warm agent was adopted as, and the
// environment that came with it (nil until then).
type adoption struct {
	env []string // as asked, for a retry's comparison
	set []string // NSYS_CORTEX_NEURON and env: over every command's
}

// adopt serves adopt: a warm agent (no id) becomes a neuron's.
func (a *Agent) adopt(req *request) (any, []byte, error) {
	var args protocol.AdoptArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if err := ids.Validate(args.Neuron); err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "adopt: %v", err)
	}
	if len(args.Env) > protocol.MaxAdoptEnv {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "adopt: %d environment variables (at most %d)", len(args.Env), protocol.MaxAdoptEnv)
	}
	size := 0
	for _, kv := range args.Env {
		size += len(kv)
		if !envEntry(kv) {
			return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "adopt: environment entry %.40q is not KEY=VALUE", kv)
		}
	}
	if size > protocol.MaxAdoptEnvBytes {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "adopt: the environment is %d bytes (at most %d)", size, protocol.MaxAdoptEnvBytes)
	}
	a.adoptMu.Lock()
	defer a.adoptMu.Unlock()
	cur := a.ident.Load()
	if cur.id != "" {
		if ad := a.adopted.Load(); cur.id == args.Neuron && ad != nil && slices.Equal(ad.env, args.Env) {
			return struct{}{}, nil, nil
		}
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "adopt: this agent serves neuron %s already", cur.id)
	}
	set := append([]string{"NSYS_CORTEX_NEURON=" + args.Neuron}, args.Env...)
	a.adopted.Store(&adoption{env: slices.Clone(args.Env), set: set})
	a.ident.Store(&ident{id: args.Neuron, secret: cur.secret})
	a.logf("serving neuron %s now (adopted)", args.Neuron)
	return struct{}{}, nil, nil
}
