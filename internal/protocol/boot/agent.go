package boot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

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
	// OOMFDFlag N: descriptor N is a stream socket on which the agent's
	// PID 1 sends one byte, with the agent's own /proc/PID/oom_score_adj
	// (SCM_RIGHTS) where it could open it: the agent, non-dumpable from
	// its first instruction, cannot open that file itself, and needs it to
	// start every command as the kernel's first victim at the memory
	// ceiling (agent.Config.OOMScoreAdj).
	OOMFDFlag = "--oom-fd"
	// SpawnCgroupFDFlag N: descriptor N is a cgroup's cgroup.threads,
	// opened for writing by the agent's PID 1 (a microVM's): the agent
	// moves the one thread it starts every command from into that
	// cgroup, where the neuron's process ceiling is, so that commands and
	// all they start count against it and the agent's own threads do not.
	// An agent that cannot move it stops: the ceiling would not hold.
	SpawnCgroupFDFlag = "--spawn-cgroup-fd"
	// RebindOK is the agent's answer to a rebind it took.
	RebindOK = "ok"
)

// Rebind is a new identity for a running agent: the neuron it serves now,
// and the secret it proves from now on; Env, KEY=VALUE entries, is added
// to what the commands it starts from then on see (a warm neuron claimed
// with an environment).
type Rebind struct {
	Neuron string   `json:"neuron"`
	Secret string   `json:"secret"`
	Env    []string `json:"env,omitempty"`
}

// MaxRebind bounds one rebind request, as a line of JSON.
const MaxRebind = 64 << 10

// SendRebind gives the agent behind f (PID 1's end of its rebind socket,
// pollable) a new identity and waits, up to timeout, for its answer.
func SendRebind(f *os.File, r *Rebind, timeout time.Duration) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) >= MaxRebind {
		return fmt.Errorf("rebinding the agent: a request of %d bytes (limit %d)", len(b), MaxRebind)
	}
	f.SetDeadline(time.Now().Add(timeout))
	defer f.SetDeadline(time.Time{})
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("rebinding the agent: %w", err)
	}
	answer := make([]byte, 0, 256)
	buf := make([]byte, 256)
	for !bytes.HasSuffix(answer, []byte("\n")) {
		n, err := f.Read(buf)
		if err != nil {
			return fmt.Errorf("rebinding the agent: %w", err)
		}
		if answer = append(answer, buf[:n]...); len(answer) > 4096 {
			return errors.New("rebinding the agent: an answer too long")
		}
	}
	if got := strings.TrimSpace(string(answer)); got != RebindOK {
		return fmt.Errorf("rebinding the agent: %s", got)
	}
	return nil
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
