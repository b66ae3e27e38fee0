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

	"github.com/nsys-cortex/cortex/internal/hostfs"
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
//
// The agent is run by path (as root, by nsbox), so binDir must be one only
// this user and root can change (hostfs.TrustedDir), and a file at the
// name is taken only if it is a regular file of this user's or root's
// that no one else can write.
func unpack(binDir string, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	p := filepath.Join(binDir, "cortex-agent-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("unpacking the embedded cortex-agent: %w", err)
	}
	if err := hostfs.TrustedDir(binDir); err != nil {
		return "", fmt.Errorf("the agent's directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err == nil && st.Size == int64(len(data)) && hostfs.TrustedFile(&st) == nil {
		return p, nil
	} else if err != nil && !errors.Is(err, unix.ENOENT) {
		return "", fmt.Errorf("embedded cortex-agent: %w", err)
	}
	if err := WriteFileAtomic(p, data, 0o755); err != nil {
		return "", fmt.Errorf("unpacking the embedded cortex-agent: %w", err)
	}
	return p, nil
}
