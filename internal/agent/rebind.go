package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// ident is who the agent says it is to hosts.
type ident struct{ id, secret string }

// serveRebind takes new identities from the agent's PID 1 until the
// descriptor ends (Run closes it): a microVM restored under another id
// (a fork) serves that id with a secret of its own, and a warm pool's
// nsbox neuron, claimed, serves the id it was claimed as. Sessions that are open
// keep what they proved; the PID 1 ends them (a restore does) so every
// host greets the new identity.
func (a *Agent) serveRebind() {
	sc := bufio.NewScanner(a.cfg.Rebind)
	sc.Buffer(make([]byte, 512), boot.MaxRebind)
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

// envEntry says whether kv is an environment entry the agent takes from
// its PID 1 (a rebind) or a host (an adopt): KEY=VALUE, a key, no NUL.
func envEntry(kv string) bool {
	k, _, ok := strings.Cut(kv, "=")
	return ok && k != "" && !strings.ContainsRune(kv, 0)
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
	for _, kv := range r.Env {
		if !envEntry(kv) {
			return fmt.Errorf("a rebind's environment entry %.40q is not KEY=VALUE", kv)
		}
	}
	a.ident.Store(&ident{id: r.Neuron, secret: r.Secret})
	// Commands started from now on see the neuron they run in.
	os.Setenv("NSYS_CORTEX_NEURON", r.Neuron)
	for _, kv := range r.Env {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	a.logf("serving neuron %s now", r.Neuron)
	return nil
}
