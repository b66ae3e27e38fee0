package firecracker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/kvmprobe"
)

// KVMProbe proves KVM runs guests (kvmprobe.Run).
type KVMProbe func(ctx context.Context, device string) kvmprobe.Result

// kvmResults caches the probe per device for the life of the process: a
// failing probe costs its timeout, and KVM does not come and go.
var kvmResults sync.Map // device -> kvmprobe.Result

func runKVMProbe(ctx context.Context, device string) kvmprobe.Result {
	if r, ok := kvmResults.Load(device); ok {
		return r.(kvmprobe.Result)
	}
	r := kvmprobe.Run(ctx, device, kvmprobe.DefaultTimeout)
	if r.Stage != "child" { // a probe that could not even start may be retried
		kvmResults.Store(device, r)
	}
	return r
}

// SelfCheck reports whether this machine can run firecracker neurons.
func SelfCheck(ctx context.Context, env sandbox.Env) sandbox.Check {
	cfg, err := ConfigFromEnv(env.Layout)
	if err != nil {
		return sandbox.Check{Mode: Mode, Isolating: true, Summary: "configuration: " + err.Error()}
	}
	return check(ctx, cfg, runKVMProbe)
}

// check runs every requirement: KVM that runs guests, the pinned
// Firecracker and its jailer, root (the jailer chroots and drops to the
// neuron's uid), cgroup v2 with memory and cpu, the guest image, and
// mkfs.ext4 for overlay disks.
func check(ctx context.Context, cfg Config, probe KVMProbe) sandbox.Check {
	c := sandbox.Check{Mode: Mode, Isolating: true}
	kvm := sandbox.CheckItem{Name: "KVM"}
	bins := checkBinaries(ctx, cfg)
	binsOK := true
	for _, b := range bins {
		binsOK = binsOK && b.OK
	}
	switch {
	case !binsOK:
		// The probe costs up to its timeout where KVM hangs, and auto
		// resolution asks every CLI run: without Firecracker, skip it.
		if _, err := os.Stat(cfg.KVMDevice); err != nil {
			kvm.Detail = fmt.Sprintf("%s: %v", cfg.KVMDevice, err)
		} else {
			kvm.Detail = "not probed: the Firecracker binaries are missing (" + cfg.KVMDevice + " exists)"
		}
	default:
		r := probe(ctx, cfg.KVMDevice)
		kvm.OK, kvm.Detail = r.OK, r.Detail
	}
	c.Items = append(append(c.Items, kvm), bins...)
	root := sandbox.CheckItem{Name: "privileges", OK: os.Geteuid() == 0, Detail: "root: the jailer chroots, makes device nodes and cgroups, then drops to the neuron's own uid"}
	if !root.OK {
		root.Detail = fmt.Sprintf("running as uid %d: the jailer needs root (it chroots, makes device nodes and cgroups, then drops to the neuron's own uid)", os.Geteuid())
	}
	c.Items = append(c.Items, root, checkCgroups(cfg.CgroupRoot), checkImage(cfg), checkMkfs())
	var missing []string
	for _, it := range c.Items {
		if !it.OK {
			missing = append(missing, it.Name+": "+it.Detail)
		}
	}
	if len(missing) > 0 {
		c.Summary = "cannot run here: " + strings.Join(missing, "; ")
		return c
	}
	c.OK = true
	c.Summary = fmt.Sprintf("KVM microVMs with Firecracker %s under its jailer", firecrackerVersion(ctx, cfg))
	return c
}

// versionCache keeps `<binary> --version` per path and modification time.
var versionCache sync.Map

// binaryVersion runs `bin --version` and returns the version it prints
// after "v" on its first line ("Firecracker v1.10.1" -> "1.10.1").
func binaryVersion(ctx context.Context, bin string) (string, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return "", err
	}
	key := bin + "@" + strconv.FormatInt(st.ModTime().UnixNano(), 10)
	if v, ok := versionCache.Load(key); ok {
		return v.(string), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v", bin, err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	i := strings.LastIndex(first, " v")
	if i < 0 {
		return "", fmt.Errorf("%s --version printed %q, not a version", bin, first)
	}
	v := strings.TrimSpace(first[i+2:])
	versionCache.Store(key, v)
	return v, nil
}

func firecrackerVersion(ctx context.Context, cfg Config) string {
	fc, _, err := cfg.binaries()
	if err != nil {
		return "?"
	}
	v, err := binaryVersion(ctx, fc)
	if err != nil {
		return "?"
	}
	return "v" + v
}

// compatible reports whether version v speaks the pinned API: the same
// major version and no older than the pin.
func compatible(v string) bool {
	parse := func(s string) (maj, min int, ok bool) {
		parts := strings.Split(s, ".")
		if len(parts) < 2 {
			return 0, 0, false
		}
		maj, e1 := strconv.Atoi(parts[0])
		min, e2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
		return maj, min, e1 == nil && e2 == nil
	}
	pmaj, pmin, _ := parse(PinnedVersion)
	maj, min, ok := parse(v)
	return ok && maj == pmaj && min >= pmin
}

func checkBinaries(ctx context.Context, cfg Config) []sandbox.CheckItem {
	fcItem := sandbox.CheckItem{Name: "firecracker"}
	jItem := sandbox.CheckItem{Name: "jailer"}
	fc, err := cfg.firecrackerBin()
	if err != nil {
		fcItem.Detail = err.Error()
		jItem.Detail = "needs firecracker first"
		return []sandbox.CheckItem{fcItem, jItem}
	}
	fv, err := binaryVersion(ctx, fc)
	switch {
	case err != nil:
		fcItem.Detail = err.Error()
	case !compatible(fv):
		fcItem.Detail = fmt.Sprintf("%s is v%s; this build speaks the API of v%s (a 1.x release no older than it)", fc, fv, PinnedVersion)
	default:
		fcItem.OK, fcItem.Detail = true, fmt.Sprintf("%s (v%s)", fc, fv)
	}
	jailer, err := cfg.jailerBin()
	if err != nil {
		jItem.Detail = err.Error()
		return []sandbox.CheckItem{fcItem, jItem}
	}
	jv, err := binaryVersion(ctx, jailer)
	switch {
	case err != nil:
		jItem.Detail = err.Error()
	case jv != fv:
		jItem.Detail = fmt.Sprintf("%s is v%s but firecracker is v%s: use the jailer of the same release", jailer, jv, fv)
	default:
		jItem.OK, jItem.Detail = true, fmt.Sprintf("%s (v%s)", jailer, jv)
	}
	return []sandbox.CheckItem{fcItem, jItem}
}

func checkCgroups(root string) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "cgroup v2"}
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		it.Detail = fmt.Sprintf("no cgroup v2 hierarchy at %s (the jailer puts each VM's memory and CPU ceilings there)", root)
		return it
	}
	have := " " + strings.TrimSpace(string(b)) + " "
	var lack []string
	for _, c := range []string{"memory", "cpu"} {
		if !strings.Contains(have, " "+c+" ") {
			lack = append(lack, c)
		}
	}
	if len(lack) > 0 {
		it.Detail = fmt.Sprintf("%s lacks the %s controller(s)", root, strings.Join(lack, " and "))
		return it
	}
	it.OK, it.Detail = true, root+": memory and CPU ceilings per VM"
	return it
}

func checkImage(cfg Config) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "guest image"}
	var missing []string
	for _, f := range []struct{ what, path, env string }{
		{"kernel", cfg.Kernel, EnvKernel}, {"initramfs", cfg.Initrd, EnvInitrd}, {"root disk", cfg.RootDisk, EnvRootDisk},
	} {
		if st, err := os.Stat(f.path); err != nil || !st.Mode().IsRegular() {
			missing = append(missing, fmt.Sprintf("%s %s (%s)", f.what, f.path, f.env))
		}
	}
	if len(missing) > 0 {
		it.Detail = "missing " + strings.Join(missing, ", ") + ": build them with `nsys-cortex image build --vm`"
		return it
	}
	it.OK, it.Detail = true, fmt.Sprintf("kernel %s, initramfs %s, root disk %s", cfg.Kernel, cfg.Initrd, cfg.RootDisk)
	return it
}

func checkMkfs() sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "overlay disks"}
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		it.OK, it.Detail = true, p+" makes each neuron's sparse ext4 overlay disk"
	} else if _, err := os.Stat("/sbin/mkfs.ext4"); err == nil {
		it.OK, it.Detail = true, "/sbin/mkfs.ext4 makes each neuron's sparse ext4 overlay disk"
	} else {
		it.Detail = "no mkfs.ext4 (install e2fsprogs)"
	}
	return it
}
