package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/internal/kvmprobe"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// EnvAccel chooses the accelerator: auto (default: KVM when it truly runs
// guests here, else TCG), kvm or tcg.
const EnvAccel = "NSYS_CORTEX_QEMU_ACCEL"

// accel is the accelerator neurons run under, and why.
type accel struct {
	KVM bool   `json:"kvm"`
	Why string `json:"why"`
}

func (a accel) String() string {
	if a.KVM {
		return "KVM (" + a.Why + ")"
	}
	return "TCG, software emulation (" + a.Why + ")"
}

// Probe timeouts: a vCPU that runs at hardware speed executes the probe
// guest in milliseconds (kvmprobe), and a kernel under KVM prints its
// first line within milliseconds.
const (
	ioctlProbeTimeout = 2 * time.Second
	bootProbeTimeout  = 3 * time.Second
)

// probeKey names the probe in the verdict's cache key, so that a verdict
// of another probe (the instructions-only one before kvmprobe) is not
// taken for this one's.
const probeKey = "kvmprobe"

var accels sync.Map // probe key -> accel

// chooseAccel decides between KVM and TCG for kernel, once per process
// and host boot (remembered in the image directory as kvm-probe.json).
func chooseAccel(ctx context.Context, bin string, im *vmimage.Image) (accel, error) {
	switch v := os.Getenv(EnvAccel); v {
	case "tcg":
		return accel{Why: EnvAccel + "=tcg"}, nil
	case "kvm":
		return accel{KVM: true, Why: EnvAccel + "=kvm"}, nil
	case "", "auto":
	default:
		return accel{}, fmt.Errorf("%s=%q: choose auto, kvm or tcg", EnvAccel, v)
	}
	key := probeKey + "\x00" + bin + "\x00" + im.Kernel()
	if st, err := os.Stat(im.Kernel()); err == nil {
		key += "\x00" + st.ModTime().String()
	}
	if a, ok := accels.Load(key); ok {
		return a.(accel), nil
	}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	cache := filepath.Join(im.Dir, "kvm-probe.json")
	var saved struct {
		Key   string `json:"key"`
		Boot  string `json:"boot"`
		Accel accel  `json:"accel"`
	}
	if b, err := os.ReadFile(cache); err == nil && json.Unmarshal(b, &saved) == nil &&
		saved.Key == key && saved.Boot == strings.TrimSpace(string(bootID)) {
		accels.Store(key, saved.Accel)
		return saved.Accel, nil
	}
	a := accel{KVM: true, Why: "a test guest ran its instructions and booted the kernel"}
	if r := kvmprobe.Run(ctx, kvmprobe.DefaultDevice, ioctlProbeTimeout); !r.OK {
		a = accel{Why: "KVM: " + r.Detail}
	} else if err := bootProbe(ctx, bin, im.Kernel()); err != nil {
		a = accel{Why: err.Error()}
	}
	if ctx.Err() != nil {
		return accel{}, ctx.Err() // not a verdict on KVM
	}
	accels.Store(key, a)
	saved.Key, saved.Boot, saved.Accel = key, strings.TrimSpace(string(bootID)), a
	if b, err := json.Marshal(&saved); err == nil {
		os.WriteFile(cache, b, 0o644) // a cache: an image directory others own just is not written
	}
	return a, nil
}

// bootProbe boots kernel under KVM with nothing else and waits for its
// first line on the serial console. Where KVM exists but does not run
// guests (no nested virtualization), the guest prints nothing: a hang,
// which only a real boot shows.
func bootProbe(ctx context.Context, bin, kernel string) error {
	ctx, cancel := context.WithTimeout(ctx, bootProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-M", "microvm,acpi=off", "-accel", "kvm", "-cpu", "host", "-m", "128M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console", "-kernel", kernel,
		"-append", "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1 reboot=t")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("KVM: starting %s: %w", bin, err)
	}
	booted := false
	var last string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "Linux version") {
			booted = true
			break
		}
		if strings.TrimSpace(line) != "" {
			last = line
		}
	}
	cancel()
	cmd.Wait() // killed: its status says nothing
	switch {
	case booted:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && last == "":
		return fmt.Errorf("KVM: a guest kernel printed nothing within %s (KVM is there but runs no guest: no nested virtualization?)", bootProbeTimeout)
	case last != "":
		return fmt.Errorf("KVM: %s", last)
	}
	return errors.New("KVM: the probe guest ended without booting")
}
