package fakefc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is the Firecracker release the fake answers as.
const Version = "1.10.1"

// ConfigFile is the name of the fake's configuration, beside the fake
// executables (the test writes it).
const ConfigFile = "fakefc.json"

// Config configures the fake processes of a test.
type Config struct {
	// Spec is the pinned API description to enforce.
	Spec string `json:"spec"`
	// CallsDir receives one <instance id>.jsonl per process: every API call.
	CallsDir string `json:"callsDir"`
	// GuestRoot holds the guests' homes (/root and /home/agent), one
	// directory per overlay disk.
	GuestRoot string `json:"guestRoot"`
	// BootDelayMs is how long a guest takes to listen after InstanceStart.
	BootDelayMs int `json:"bootDelayMs"`
	// CtlLog receives, as JSON lines, the control requests the guests got
	// (the fake records a clock and a seed it must not apply to the host).
	CtlLog string `json:"ctlLog"`
	// CgroupRoot stands for the cgroup v2 mount the jailer writes limits to.
	CgroupRoot string `json:"cgroupRoot"`
	// RefuseRebind makes the guests refuse a new identity, as a hostile
	// (or older) guest would.
	RefuseRebind bool `json:"refuseRebind,omitempty"`
	// CtlDelayMs is how much later than the agent's port the control port
	// listens: what a host dials meanwhile reaches the agent alone.
	CtlDelayMs int `json:"ctlDelayMs,omitempty"`
}

// LoadConfig reads the configuration beside the executable this process
// was started as.
func LoadConfig() (*Config, error) {
	var c Config
	b, err := os.ReadFile(filepath.Join(filepath.Dir(os.Args[0]), ConfigFile))
	if err != nil {
		return nil, err
	}
	return &c, json.Unmarshal(b, &c)
}

// jailer's flags (v1.10.1): which take a value, which repeat.
var jailerFlags = map[string]struct{ value, multi bool }{
	"id": {value: true}, "exec-file": {value: true}, "uid": {value: true}, "gid": {value: true},
	"chroot-base-dir": {value: true}, "netns": {value: true}, "daemonize": {}, "new-pid-ns": {},
	"cgroup": {value: true, multi: true}, "cgroup-version": {value: true}, "parent-cgroup": {value: true},
	"resource-limit": {value: true, multi: true}, "version": {},
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// parseFlags reads "--name value" pairs up to "--".
func parseFlags(args []string, known map[string]struct{ value, multi bool }) (map[string][]string, []string, error) {
	got := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return got, args[i+1:], nil
		}
		name, ok := strings.CutPrefix(a, "--")
		spec, known := known[name]
		if !ok || !known {
			//lint:ignore ST1005 the real jailer's argument-parser message, worded as it words it
			return nil, nil, fmt.Errorf("Found argument '%s' which wasn't expected, or isn't valid in this context.", a)
		}
		if len(got[name]) > 0 && !spec.multi {
			//lint:ignore ST1005 the real jailer's argument-parser message, worded as it words it
			return nil, nil, fmt.Errorf("The argument '--%s' was provided more than once.", name)
		}
		if !spec.value {
			got[name] = append(got[name], "")
			continue
		}
		if i+1 >= len(args) {
			//lint:ignore ST1005 the real jailer's argument-parser message, worded as it words it
			return nil, nil, fmt.Errorf("The argument '--%s' requires a value but none was supplied.", name)
		}
		i++
		got[name] = append(got[name], args[i])
	}
	return got, nil, nil
}

func validID(id string) bool {
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

// JailerMain is the fake jailer: it checks its command line as jailer
// v1.10.1 does, makes the chroot directory and the cgroup the real one
// would, and execs the Firecracker binary in place (same pid) with the
// arguments the real one passes. It emulates the chroot and the drop of
// privileges by telling the fake Firecracker (FAKEFC_ROOT, FAKEFC_UID,
// FAKEFC_GID), which then resolves and checks paths as the jailed user.
func JailerMain() {
	cfg, err := LoadConfig()
	if err != nil {
		die("fake jailer: %v", err)
	}
	f, fcArgs, err := parseFlags(os.Args[1:], jailerFlags)
	if err != nil {
		die("jailer: %v", err)
	}
	if f["version"] != nil {
		fmt.Printf("Jailer v%s\n", Version)
		os.Exit(0)
	}
	for _, req := range []string{"id", "exec-file", "uid", "gid"} {
		if f[req] == nil {
			die("jailer: Argument '--%s' required, but not found.", req)
		}
	}
	one := func(k, def string) string {
		if v := f[k]; v != nil {
			return v[0]
		}
		return def
	}
	id, exe := one("id", ""), one("exec-file", "")
	if !validID(id) {
		die("jailer: Invalid instance ID: %q (alphanumeric characters and hyphens, at most 64)", id)
	}
	if st, err := os.Stat(exe); err != nil || !st.Mode().IsRegular() {
		die("jailer: Failed to canonicalize path %s: No such file or directory (os error 2)", exe)
	}
	if !strings.Contains(filepath.Base(exe), "firecracker") {
		die("jailer: Invalid filename. The filename of `--exec-file` option must contain \"firecracker\": %s", exe)
	}
	uid, err1 := strconv.Atoi(one("uid", ""))
	gid, err2 := strconv.Atoi(one("gid", ""))
	if err1 != nil || err2 != nil {
		die("jailer: Invalid uid or gid")
	}
	base := one("chroot-base-dir", "/srv/jailer")
	if !filepath.IsAbs(base) {
		die("jailer: chroot base dir %s is not absolute", base)
	}
	for _, k := range []string{"daemonize", "new-pid-ns"} {
		if f[k] != nil {
			die("fake jailer: --%s is not emulated", k)
		}
	}
	if ns := one("netns", ""); ns != "" {
		if _, err := os.Stat(ns); err != nil {
			die("jailer: Failed to open netns %s: %v", ns, err)
		}
	}
	for _, rl := range f["resource-limit"] {
		k, v, ok := strings.Cut(rl, "=")
		if _, err := strconv.ParseUint(v, 10, 64); !ok || err != nil || (k != "fsize" && k != "no-file") {
			die("jailer: Invalid resource limit %q", rl)
		}
	}
	if err := cgroups(cfg, f, one, filepath.Base(exe), id); err != nil {
		die("jailer: %v", err)
	}
	root := filepath.Join(base, filepath.Base(exe), id, "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		die("jailer: %v", err)
	}
	now := time.Now()
	argv := append([]string{exe, "--id", id, "--start-time-us", strconv.FormatInt(now.UnixMicro(), 10),
		"--start-time-cpu-us", "0", "--parent-cpu-time-us", "0"}, fcArgs...)
	env := []string{"FAKEFC_ROOT=" + root, fmt.Sprintf("FAKEFC_UID=%d", uid), fmt.Sprintf("FAKEFC_GID=%d", gid)}
	// The exec file is opened now: the guest's home mount below may hide
	// where it lives.
	bin, err := os.Open(exe)
	if err != nil {
		die("jailer: %v", err)
	}
	runtime.LockOSThread() // a mount namespace is the thread's until exec makes it the process's
	if home, err := guestHome(filepath.Join(cfg.GuestRoot, id)); err != nil {
		die("fake jailer: %v", err)
	} else if home != "" {
		env = append(env, "FAKEFC_GUEST_HOME="+home)
	}
	if err := os.Chdir(root); err != nil {
		die("jailer: %v", err)
	}
	if err := syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", bin.Fd()), argv, env); err != nil {
		die("jailer: exec %s: %v", exe, err)
	}
}

// GuestHome is the guest's home, where the image puts it.
const GuestHome = "/home/agent"

// guestHome prepares, in a mount namespace of the fake VM's own (the real
// jailer unshares one too), an empty /home (a tmpfs: the host's is not
// there) with GuestHome in it, where the fake Firecracker binds the home
// that belongs to its overlay disk. Without the privilege to do that it
// returns a directory the guest uses instead.
func guestHome(dir string) (string, error) {
	if os.Geteuid() != 0 {
		return dir, os.MkdirAll(dir, 0o755)
	}
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return "", fmt.Errorf("unshare: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("making mounts private: %w", err)
	}
	if err := syscall.Mount("tmpfs", "/home", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return "", fmt.Errorf("tmpfs on /home: %w", err)
	}
	return "", os.MkdirAll(GuestHome, 0o755)
}

// cgroups writes the --cgroup limits where the real jailer would:
// <cgroup v2 mount>/<parent cgroup>/<id>/<file>.
func cgroups(cfg *Config, f map[string][]string, one func(string, string) string, execName, id string) error {
	version := one("cgroup-version", "1")
	if version != "1" && version != "2" {
		return fmt.Errorf("invalid cgroup version %q", version)
	}
	if len(f["cgroup"]) == 0 {
		return nil
	}
	if version != "2" {
		return fmt.Errorf("fake jailer emulates cgroup v2 only")
	}
	controllers, err := os.ReadFile(filepath.Join(cfg.CgroupRoot, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup v2 is not mounted at %s: %v", cfg.CgroupRoot, err)
	}
	dir := filepath.Join(cfg.CgroupRoot, one("parent-cgroup", execName), id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range f["cgroup"] {
		file, value, ok := strings.Cut(c, "=")
		ctrl, _, dotted := strings.Cut(file, ".")
		if !ok || !dotted || value == "" {
			//lint:ignore ST1005 printed as "jailer: Invalid ...", the jailer's style, as the die calls are
			return fmt.Errorf("Invalid cgroup %q: expected <controller>.<file>=<value>", c)
		}
		if !strings.Contains(" "+strings.TrimSpace(string(controllers))+" ", " "+ctrl+" ") {
			return fmt.Errorf("cgroup controller %s is not available (%s)", ctrl, strings.TrimSpace(string(controllers)))
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
