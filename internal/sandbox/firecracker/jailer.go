package firecracker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// Paths inside a jail (the chroot Firecracker runs in), as the API sees
// them.
const (
	jailAPISock   = "/api.sock"
	jailVsock     = "/v.sock"
	jailKernel    = "/vmlinux"
	jailInitrd    = "/initrd.img"
	jailRootDisk  = "/rootfs.ext4"
	jailOverlay   = "/overlay.ext4"
	jailConfig    = "/config.img"
	jailLog       = "/firecracker.log"
	jailMetrics   = "/metrics.json"
	jailSnapState = "/snapshot.vmstate"
	jailSnapMem   = "/snapshot.mem"
)

// JailSpec is what the jailer's command line says.
type JailSpec struct {
	// ID is the jail's id (see JailID): alphanumerics and '-', 1-64.
	ID string
	// ExecFile is the firecracker binary; its name must contain "firecracker".
	ExecFile string
	// UID and GID are who Firecracker runs as once jailed; never root.
	UID, GID int
	// ChrootBase is where the jail is made: <ChrootBase>/<exec name>/<ID>/root.
	ChrootBase string
	// NetNS is a network namespace (a path) to join; empty: the one the
	// jailer starts in.
	NetNS string
	// CgroupVersion is 1 or 2; ParentCgroup the cgroup the jail's goes
	// under; Cgroups are "<controller>.<file>" -> value.
	CgroupVersion int
	ParentCgroup  string
	Cgroups       map[string]string
	// ResourceLimits are the jailer's rlimits ("fsize", "no-file").
	ResourceLimits map[string]uint64
	// NewPIDNS asks the jailer to start Firecracker in a new PID namespace.
	// The backend leaves it off and starts the jailer itself in new PID
	// and network namespaces instead: with --new-pid-ns the jailer forks
	// Firecracker and exits, and the VM would be no process's child.
	NewPIDNS bool
	// Daemonize detaches Firecracker from the jailer's session and stdio;
	// the backend keeps it off (it wants the VM's exit and its output).
	Daemonize bool
	// APISock is Firecracker's --api-sock, inside the jail.
	APISock string
}

// JailerArgs is the jailer's command line for s (without the jailer's own
// path): the jailer's flags, then "--" and Firecracker's. No
// --config-file: every VM is configured through the API.
func JailerArgs(s JailSpec) ([]string, error) {
	if !jailIDOK(s.ID) {
		return nil, fmt.Errorf("jail id %q: use 1-64 letters, digits and '-'", s.ID)
	}
	if !filepath.IsAbs(s.ExecFile) || !strings.Contains(filepath.Base(s.ExecFile), "firecracker") {
		return nil, fmt.Errorf("exec file %q: the jailer takes an absolute path whose name contains \"firecracker\"", s.ExecFile)
	}
	if s.UID <= 0 || s.GID <= 0 {
		return nil, fmt.Errorf("uid %d, gid %d: a jailed Firecracker never runs as root", s.UID, s.GID)
	}
	if !filepath.IsAbs(s.ChrootBase) {
		return nil, fmt.Errorf("chroot base %q is not an absolute path", s.ChrootBase)
	}
	if s.NetNS != "" && !filepath.IsAbs(s.NetNS) {
		return nil, fmt.Errorf("network namespace %q is not an absolute path", s.NetNS)
	}
	if s.CgroupVersion != 1 && s.CgroupVersion != 2 {
		return nil, fmt.Errorf("cgroup version %d: 1 or 2", s.CgroupVersion)
	}
	if !strings.HasPrefix(s.APISock, "/") {
		return nil, fmt.Errorf("API socket %q: a path inside the jail, from its root", s.APISock)
	}
	args := []string{"--id", s.ID, "--exec-file", s.ExecFile, "--uid", strconv.Itoa(s.UID), "--gid", strconv.Itoa(s.GID),
		"--chroot-base-dir", s.ChrootBase}
	if s.NetNS != "" {
		args = append(args, "--netns", s.NetNS)
	}
	args = append(args, "--cgroup-version", strconv.Itoa(s.CgroupVersion))
	if s.ParentCgroup != "" {
		if strings.ContainsAny(s.ParentCgroup, " \n") || strings.Contains(s.ParentCgroup, "..") {
			return nil, fmt.Errorf("parent cgroup %q", s.ParentCgroup)
		}
		args = append(args, "--parent-cgroup", s.ParentCgroup)
	}
	for _, k := range sortedKeys(s.Cgroups) {
		v := s.Cgroups[k]
		ctrl, file, ok := strings.Cut(k, ".")
		if !ok || ctrl == "" || file == "" || strings.ContainsAny(k, "=/ \n") || v == "" || strings.ContainsAny(v, "\n=") {
			return nil, fmt.Errorf("cgroup setting %q=%q: want <controller>.<file>=<value>", k, v)
		}
		args = append(args, "--cgroup", k+"="+v)
	}
	for _, k := range sortedKeys(s.ResourceLimits) {
		if k != "fsize" && k != "no-file" {
			return nil, fmt.Errorf("resource limit %q: the jailer knows fsize and no-file", k)
		}
		args = append(args, "--resource-limit", k+"="+strconv.FormatUint(s.ResourceLimits[k], 10))
	}
	if s.NewPIDNS {
		args = append(args, "--new-pid-ns")
	}
	if s.Daemonize {
		args = append(args, "--daemonize")
	}
	return append(args, "--", "--api-sock", s.APISock), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jailIDOK(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// JailID is neuron id's jail id under lay: "<home tag>-<id>" (layout.Tag:
// this home's jails apart from another's under one chroot base) when the id
// is jailer-safe (letters, digits, '-') and short enough, otherwise
// "<home tag>-h<hash of the id>".
func JailID(lay layout.Layout, id string) string {
	tag := lay.Tag()
	if j := tag + "-" + id; jailIDOK(j) {
		return j
	}
	sum := sha256.Sum256([]byte(id))
	return tag + "-h" + hex.EncodeToString(sum[:8])
}

// jailDir is the jailer's directory of a jail; the chroot is its root/.
func jailDir(base, execFile, jailID string) string {
	return filepath.Join(base, filepath.Base(execFile), jailID)
}

// CgroupSettings are the cgroup v2 limits of a VM with memBytes of guest
// memory and cpus CPUs: memory.max leaves room for the VMM beyond the
// guest's memory, cpu.max is the CPU share (period 100 ms).
func CgroupSettings(memBytes int64, cpus float64) map[string]string {
	period := 100000
	return map[string]string{
		"memory.max": strconv.FormatInt(memBytes+vmmOverhead, 10),
		"cpu.max":    fmt.Sprintf("%d %d", int(cpus*float64(period)+0.5), period),
	}
}
