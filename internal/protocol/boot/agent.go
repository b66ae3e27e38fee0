package boot

import "os"

// The agent's own command line, as every mode's host or PID 1 starts it
// (the ordinary agent: internal/agent, cmd/cortex-agent).

// How a per-start secret reaches the agent (see protocol.AgentProof).
const (
	// SecretFDFlag N: the agent reads its secret from descriptor N, all of
	// it, and closes it.
	SecretFDFlag = "--secret-fd"
	// SecretEnv is where the agent finds its secret when no descriptor can
	// be passed (a container's environment): the agent removes it from its
	// environment before it starts anything, and is non-dumpable from its
	// first moment, so no command reads it.
	SecretEnv = "NSYS_CORTEX_AGENT_SECRET"
	// RebindFDFlag N: descriptor N is a stream socket on which the agent's
	// PID 1 may give it a new identity (Rebind, a line of JSON; the agent
	// answers RebindOK or an error, a line): a microVM restored from
	// another neuron's snapshot (a fork) serves its new id with a fresh
	// secret. The agent keeps it from every command it starts.
	RebindFDFlag = "--rebind-fd"
	// RebindOK is the agent's answer to a rebind it took.
	RebindOK = "ok"
)

// Rebind is a new identity for a running agent: the neuron it serves now,
// and the secret it proves from now on.
type Rebind struct {
	Neuron string `json:"neuron"`
	Secret string `json:"secret"`
}

// Agent flags a sandbox adds for its agent.
const (
	// ConfineFlag makes the agent confine itself (no_new_privs, seccomp,
	// Landlock where the kernel has it) before it serves anything.
	ConfineFlag = "--confine"
	// NestedUsernsFlag, with ConfineFlag, lets the agent's programs create
	// user namespaces of their own (the policy's consent to inner sandboxes).
	NestedUsernsFlag = "--nested-userns"
)

// SecretPipe returns the read end of a pipe that holds secret and nothing
// else (its write end closed): the descriptor a host or a PID 1 passes the
// agent (ExtraFiles) for SecretFDFlag. The caller closes its copy once the
// child has started.
func SecretPipe(secret string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.WriteString(secret)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}
