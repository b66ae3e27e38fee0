package docker

import (
	"fmt"
	"strconv"
	"strings"
)

// Inside paths and the agent's port.
const (
	ChannelDir = "/run/nsys-cortex"
	Home       = "/home/agent"
	Workspace  = Home + "/workspace"
	AgentPort  = 9999
)

// Labels every neuron container carries.
const (
	LabelManaged = "nsys-cortex.managed"
	LabelID      = "nsys-cortex.id"
	LabelHome    = "nsys-cortex.home"
)

// RunSpec is everything a neuron's `docker run` command line is made of.
type RunSpec struct {
	// Name is the container's name; ID the neuron's; HomeTag tells this
	// home's containers from another home's on the same daemon.
	Name, ID, HomeTag string
	Image             string
	// UID and GID are the (non-root) user the container runs as.
	UID, GID int
	// Channel and Home are the host directories mounted at ChannelDir and
	// Home: the only two mounts (the tcp transport, Publish, has no
	// channel directory).
	Channel, Home string
	// Network is "none", a docker network's name, or "" for the daemon's
	// default network.
	Network string
	// Publish publishes the agent's port on the host's loopback (tcp).
	Publish bool
	// Ceilings.
	MemoryBytes int64
	Pids        int
	CPUs        float64
	TmpBytes    int64
	// Env is the container's whole environment (KEY=VALUE). It does not go
	// on the command line, where every user of the host could read it: it
	// goes through EnvFile.
	Env []string
	// EnvFile is the path the docker client reads Env from.
	EnvFile string
	// AgentArgs are the agent's arguments.
	AgentArgs []string
}

// RunArgs returns the arguments of `docker` that run a neuron: the
// boundary, pinned by tests. The container runs as a non-root user with no
// capabilities and no way to gain privileges, on a read-only root with a
// private /tmp, under memory, process and CPU ceilings, detached (no client
// process stays on the host for it: the daemon keeps it, and its output),
// and with exactly two host directories mounted: the channel
// directory (read-only: the agent only finds sockets there and connects)
// and the neuron's home. The agent itself is PID 1 — no docker init, whose
// environment every command could read — and reaps orphans as init does.
func RunArgs(s RunSpec) ([]string, error) {
	paths := []struct{ what, v string }{{"home", s.Home}}
	if !s.Publish {
		paths = append(paths, struct{ what, v string }{"channel directory", s.Channel})
	} else if s.Channel != "" {
		return nil, fmt.Errorf("docker: the tcp transport has no channel directory to mount")
	}
	for _, p := range paths {
		if p.v == "" || !strings.HasPrefix(p.v, "/") {
			return nil, fmt.Errorf("docker: the %s %q is not an absolute path", p.what, p.v)
		}
		if strings.ContainsAny(p.v, ",\n") {
			return nil, fmt.Errorf("docker: the %s %q holds a ',' or a newline, which a docker mount cannot take", p.what, p.v)
		}
	}
	if s.UID <= 0 || s.GID <= 0 {
		return nil, fmt.Errorf("docker: a neuron never runs as root (uid %d, gid %d)", s.UID, s.GID)
	}
	if s.Image == "" || s.Name == "" || s.ID == "" {
		return nil, fmt.Errorf("docker: a neuron needs an image, a name and an id")
	}
	if s.Publish && s.Network == "none" {
		return nil, fmt.Errorf("docker: network none has no port to publish")
	}
	tmp := "/tmp:rw,exec,nosuid,nodev,mode=1777"
	if s.TmpBytes > 0 {
		tmp += ",size=" + strconv.FormatInt(s.TmpBytes, 10)
	}
	a := []string{"run", "--detach", "--pull", "never",
		"--name", s.Name, "--hostname", hostname(s.ID),
		"--label", LabelManaged + "=true", "--label", LabelID + "=" + s.ID, "--label", LabelHome + "=" + s.HomeTag,
		"--user", fmt.Sprintf("%d:%d", s.UID, s.GID),
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--read-only", "--tmpfs", tmp,
		// The agent's output stays with the daemon, capped, until the
		// host copies it into the neuron's log (SyncLog).
		"--log-driver", "json-file", "--log-opt", "max-size=1m", "--log-opt", "max-file=2",
	}
	if s.MemoryBytes > 0 {
		m := strconv.FormatInt(s.MemoryBytes, 10)
		a = append(a, "--memory", m, "--memory-swap", m) // no swap beyond the memory ceiling
	}
	if s.Pids > 0 {
		a = append(a, "--pids-limit", strconv.Itoa(s.Pids))
	}
	if s.CPUs > 0 {
		a = append(a, "--cpus", strconv.FormatFloat(s.CPUs, 'f', -1, 64))
	}
	if s.Network != "" {
		a = append(a, "--network", s.Network)
	}
	if s.Publish {
		a = append(a, "--publish", fmt.Sprintf("127.0.0.1:0:%d/tcp", AgentPort))
	}
	if !s.Publish {
		a = append(a, "--mount", "type=bind,source="+s.Channel+",target="+ChannelDir+",readonly")
	}
	a = append(a,
		"--mount", "type=bind,source="+s.Home+",target="+Home,
		"--workdir", Workspace)
	if s.EnvFile != "" {
		a = append(a, "--env-file", s.EnvFile)
	}
	a = append(a, s.Image, "cortex-agent")
	return append(a, s.AgentArgs...), nil
}

// EnvFileContent is the env file docker reads a container's environment
// from; a value docker cannot carry (a newline) is an error.
func EnvFileContent(env []string) ([]byte, error) {
	var b strings.Builder
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("environment entry %q is not KEY=VALUE", kv)
		}
		if strings.ContainsAny(kv, "\n\r\x00") {
			return nil, fmt.Errorf("environment variable %s holds a newline, which docker cannot pass to a container", k)
		}
		b.WriteString(kv)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// hostname makes a neuron id a valid host name (letters, digits and '-',
// at most 63 characters).
func hostname(id string) string {
	h := []byte(id)
	for i, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			h[i] = '-'
		}
	}
	if len(h) > 63 {
		h = h[:63]
	}
	if t := strings.Trim(string(h), "-"); t != "" {
		return t
	}
	return "neuron"
}
