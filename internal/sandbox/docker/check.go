package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// daemonInfo is what the daemon says of itself.
type daemonInfo struct {
	version string
	os      string // e.g. "Docker Desktop", "Debian GNU/Linux 12 (bookworm)"
	err     error
	at      time.Time
	key     string
}

var (
	daemonMu     sync.Mutex
	daemonCached daemonInfo
)

// daemon asks the daemon about itself, at most every 30 seconds for the
// same DOCKER_HOST and DOCKER_CONTEXT (a failure is asked again at once).
func daemon() daemonInfo {
	key := os.Getenv("DOCKER_HOST") + "|" + os.Getenv("DOCKER_CONTEXT") + "|" + os.Getenv(EnvDockerCLI)
	daemonMu.Lock()
	defer daemonMu.Unlock()
	if c := daemonCached; c.key == key && c.err == nil && time.Since(c.at) < 30*time.Second {
		return c
	}
	info := daemonInfo{key: key, at: time.Now()}
	out, err := docker(context.Background(), "version", "--format", "{{.Server.Version}}")
	if err != nil {
		info.err = err
	} else {
		info.version = strings.TrimSpace(out)
		if out, err := docker(context.Background(), "info", "--format", "{{.OperatingSystem}}"); err == nil {
			info.os = strings.TrimSpace(out)
		}
	}
	daemonCached = info
	return info
}

// resolveTransport says which transport neurons use, and why.
func resolveTransport(ctx context.Context) (string, string, error) {
	switch t := os.Getenv(EnvTransport); t {
	case "unix", "tcp":
		return t, EnvTransport + "=" + t, nil
	case "", "auto":
		d := daemon()
		if d.err != nil {
			return "", "", &sandbox.UnavailableError{Mode: Mode, Reason: d.err.Error()}
		}
		if strings.Contains(d.os, "Docker Desktop") {
			return "tcp", "the daemon is Docker Desktop, in a VM: no Unix socket can be shared with it", nil
		}
		return "unix", "the daemon shares this machine's kernel", nil
	default:
		return "", "", &sandbox.InvalidError{Reason: fmt.Sprintf("%s=%q: choose auto, unix or tcp", EnvTransport, t)}
	}
}

// SelfCheck reports whether docker mode can run here: the client, a daemon
// that answers, the image, and the transport.
func SelfCheck(ctx context.Context, env sandbox.Env) (c sandbox.Check) {
	c = sandbox.Check{Mode: Mode, Isolating: true}
	client := sandbox.CheckItem{Name: "docker client"}
	d := sandbox.CheckItem{Name: "docker daemon"}
	img := sandbox.CheckItem{Name: "image " + image(sandbox.CreateOptions{})}
	tr := sandbox.CheckItem{Name: "transport"}
	defer func() { c.Items = []sandbox.CheckItem{client, d, img, tr} }()
	bin, err := dockerBin()
	if err != nil {
		client.Detail = err.Error()
		d.Detail, img.Detail, tr.Detail = "needs the client", "needs the client", "needs the client"
		c.Summary = client.Detail
		return c
	}
	client.OK, client.Detail = true, bin
	info := daemon()
	if info.err != nil {
		d.Detail = info.err.Error()
		if errors.Is(info.err, errDaemon) {
			d.Detail += " (start dockerd, or check DOCKER_HOST and your permission on its socket)"
		}
		img.Detail, tr.Detail = "needs the daemon", "needs the daemon"
		c.Summary = "the docker daemon does not answer"
		return c
	}
	d.OK, d.Detail = true, "version "+info.version+", "+info.os
	if t, why, err := resolveTransport(ctx); err != nil {
		tr.Detail = err.Error()
	} else {
		tr.OK, tr.Detail = true, t+": "+why
	}
	name := image(sandbox.CreateOptions{})
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", name); err != nil {
		img.Detail = "not on the daemon: build it with `nsys-cortex image build`"
		c.Summary = "image " + name + " is not on the daemon (nsys-cortex image build makes it)"
		return c
	}
	img.OK, img.Detail = true, "present"
	c.OK = tr.OK
	c.Summary = "ready"
	if !tr.OK {
		c.Summary = tr.Detail
	}
	return c
}
