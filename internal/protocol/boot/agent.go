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
)

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
