package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// EnvAgentBin names an agent binary to use instead of the built-in one.
const EnvAgentBin = "NSYS_CORTEX_AGENT_BIN"

// AgentBinary finds the cortex-agent to put into neurons, in this order:
// $NSYS_CORTEX_AGENT_BIN; the agent embedded in this executable, unpacked
// once under binDir by its content hash; cortex-agent beside this executable.
func AgentBinary(binDir string, embedded []byte) (string, error) {
	if p := os.Getenv(EnvAgentBin); p != "" {
		return p, checkAgent(p, EnvAgentBin)
	}
	if len(embedded) > 0 {
		return unpack(binDir, embedded)
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "cortex-agent")
		if err := checkAgent(p, "beside "+exe); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("cortex-agent not found: this nsys-cortex has no embedded agent and none was found at %s; "+
		"build with `make build`, put cortex-agent beside nsys-cortex, or set %s", strings.Join(tried, ", "), EnvAgentBin)
}

func checkAgent(p, where string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("cortex-agent (%s): %w", where, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("cortex-agent %s (%s) is not a regular file", p, where)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("cortex-agent %s (%s) is not executable", p, where)
	}
	return nil
}

// unpack writes the embedded agent to binDir/cortex-agent-<hash> unless a
// file of that name and size is already there.
func unpack(binDir string, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	p := filepath.Join(binDir, "cortex-agent-"+hex.EncodeToString(sum[:8]))
	if st, err := os.Stat(p); err == nil && st.Size() == int64(len(data)) {
		return p, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("embedded cortex-agent: %w", err)
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("unpacking the embedded cortex-agent: %w", err)
	}
	if err := WriteFileAtomic(p, data, 0o755); err != nil {
		return "", fmt.Errorf("unpacking the embedded cortex-agent: %w", err)
	}
	return p, nil
}
