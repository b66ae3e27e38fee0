package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// EnvDockerCLI names the docker client to run (default: "docker" on PATH).
const EnvDockerCLI = "NSYS_CORTEX_DOCKER_CLI"

// cliTimeout bounds one docker command that should answer at once.
const cliTimeout = 20 * time.Second

// errDaemon marks a docker command that failed because the daemon did not
// answer (not running, or not reachable with these permissions).
var errDaemon = errors.New("the docker daemon does not answer")

// dockerBin returns the docker client to run.
func dockerBin() (string, error) {
	name := os.Getenv(EnvDockerCLI)
	if name == "" {
		name = "docker"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("the docker client (%s) is not installed: %w", name, err)
	}
	return p, nil
}

// docker runs a docker command and returns its standard output. A failure
// carries docker's own words, and errDaemon when the daemon did not answer.
func docker(ctx context.Context, args ...string) (string, error) {
	bin, err := dockerBin()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		if daemonDown(msg) {
			return "", fmt.Errorf("%w: docker %s: %s", errDaemon, args[0], msg)
		}
		return "", fmt.Errorf("docker %s: %s", args[0], msg)
	}
	return out.String(), nil
}

// daemonDown recognises docker's words for a daemon it cannot reach.
func daemonDown(msg string) bool {
	for _, s := range []string{"Cannot connect to the Docker daemon", "Is the docker daemon running",
		"permission denied while trying to connect to the Docker daemon", "error during connect"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
