package nsbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// probeResult is what this machine offers nsbox, one item a capability.
type probeResult struct {
	userns, overlay, seccomp, landlock, cgroups, egress sandbox.CheckItem
}

var probes sync.Map // home -> *probeResult

// probe checks this machine once per process (and home).
func probe(env sandbox.Env) *probeResult {
	if p, ok := probes.Load(env.Layout.Home); ok {
		return p.(*probeResult)
	}
	p := runProbe(env)
	probes.Store(env.Layout.Home, p)
	return p
}

func runProbe(env sandbox.Env) *probeResult {
	p := &probeResult{
		userns:   sandbox.CheckItem{Name: "user namespaces"},
		overlay:  sandbox.CheckItem{Name: "overlayfs in a user namespace"},
		seccomp:  sandbox.CheckItem{Name: "seccomp"},
		landlock: sandbox.CheckItem{Name: "Landlock"},
		cgroups:  sandbox.CheckItem{Name: "cgroups"},
		egress:   sandbox.CheckItem{Name: "network egress allow-lists"},
	}
	bin, err := env.AgentBinary()
	if err != nil {
		p.userns.Detail = err.Error()
		p.overlay.Detail = "needs the agent"
	} else {
		p.userns, p.overlay = probeNamespaces(env, bin)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil && bytes.Contains(b, []byte("\nSeccomp:")) {
		p.seccomp.OK, p.seccomp.Detail = true, "filter mode available"
	} else {
		p.seccomp.Detail = "the kernel reports no seccomp support"
	}
	// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
	// answers the ABI, or fails where the kernel has no Landlock (the LSM
	// list in securityfs is often not mounted: not a test).
	switch abi, _, e := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1); {
	case e != 0:
		p.landlock.Detail = fmt.Sprintf("not available (%v): the namespaces and seccomp are the boundary; abstract Unix sockets of "+
			"the host stay reachable to a neuron with network full", e)
	case abi < 6:
		p.landlock.Detail = fmt.Sprintf("ABI %d: too old to scope (6 scopes abstract Unix sockets and signals); not applied", abi)
	default:
		p.landlock.OK = true
		p.landlock.Detail = fmt.Sprintf("ABI %d: the agent and its commands run in a domain that reaches no abstract Unix socket "+
			"and signals no process outside the neuron", abi)
	}
	if cg := detectCgroups(); cg != nil {
		p.cgroups.OK, p.cgroups.Detail = true, cg.describe()+": memory, process and CPU ceilings"
	} else {
		p.cgroups.Detail = "none usable (v2 needs memory and pids delegated; v1 needs root): processes are capped by RLIMIT_NPROC; memory and CPU limits are refused"
	}
	switch {
	case !p.userns.OK:
		p.egress.Detail = "needs user namespaces"
	default:
		p.egress = probeNetwork(bin)
	}
	return p
}

// probeNetwork starts `cortex-agent probe-network` in a new user namespace,
// which makes a network namespace on one thread and listens in it.
func probeNetwork(bin string) sandbox.CheckItem {
	item := sandbox.CheckItem{Name: "network egress allow-lists"}
	var out bytes.Buffer
	cmd := exec.Command(bin, "probe-network")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		item.Detail = strings.TrimSpace(out.String())
		if item.Detail == "" {
			item.Detail = err.Error()
		}
		return item
	}
	item.OK = true
	item.Detail = "an HTTP proxy at " + EgressProxy + " inside, served by PID 1 from the host's network; no other route out"
	return item
}

// probeNamespaces starts `cortex-agent probe` in new user, mount and pid
// namespaces, which mounts an overlay there.
func probeNamespaces(env sandbox.Env, bin string) (userns, overlay sandbox.CheckItem) {
	userns = sandbox.CheckItem{Name: "user namespaces"}
	overlay = sandbox.CheckItem{Name: "overlayfs in a user namespace"}
	base := env.Layout.Overlays
	if err := os.MkdirAll(base, 0o755); err != nil {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, ".nsbox-probe-")
	if err != nil {
		userns.Detail = err.Error()
		return
	}
	defer os.RemoveAll(dir)
	var out bytes.Buffer
	cmd := exec.Command(bin, "probe", filepath.Join(dir, "p"))
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Start(); err != nil {
		userns.Detail = fmt.Sprintf("cannot create one: %v (check kernel.unprivileged_userns_clone and user.max_user_namespaces)", err)
		overlay.Detail = "needs user namespaces"
		return
	}
	userns.OK, userns.Detail = true, "available"
	if err := cmd.Wait(); err != nil {
		overlay.Detail = strings.TrimSpace(out.String())
		if overlay.Detail == "" {
			overlay.Detail = err.Error()
		}
		overlay.Detail += " (needs Linux 5.11 or newer)"
		return
	}
	overlay.OK, overlay.Detail = true, "available on "+base
	return
}
