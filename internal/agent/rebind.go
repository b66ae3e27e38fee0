package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// ident is who the agent says it is to hosts.
type ident struct{ id, secret string }

// maxRebindLine bounds one rebind request.
const maxRebindLine = 4096

// serveRebind takes new identities from the agent's PID 1 until the
// descriptor ends (Run closes it): a microVM restored under another id
// (a fork) serves that id with a secret of its own. Sessions that are open
// keep what they proved; the PID 1 ends them (a restore does) so every
// host greets the new identity.
func (a *Agent) serveRebind() {
	sc := bufio.NewScanner(a.cfg.Rebind)
	sc.Buffer(make([]byte, 512), maxRebindLine)
	for sc.Scan() {
		answer := boot.RebindOK
		if err := a.rebind(sc.Bytes()); err != nil {
			answer = "error: " + err.Error()
		}
		if _, err := fmt.Fprintln(a.cfg.Rebind, answer); err != nil {
			return
		}
	}
}

func (a *Agent) rebind(line []byte) error {
	var r boot.Rebind
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("a rebind that is no JSON: %w", err)
	}
	if err := ids.Validate(r.Neuron); err != nil {
		return err
	}
	if len(r.Secret) < 32 {
		return fmt.Errorf("a rebind needs a secret of at least 32 characters")
	}
	a.ident.Store(&ident{id: r.Neuron, secret: r.Secret})
	// Commands started from now on see the neuron they run in.
	os.Setenv("NSYS_CORTEX_NEURON", r.Neuron)
	a.logf("serving neuron %s now (restored from another neuron's snapshot)", r.Neuron)
	return nil
}
