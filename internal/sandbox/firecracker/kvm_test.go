package firecracker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// These run real Firecracker VMs: on a KVM host with Firecracker v1.10.1,
// its jailer and the guest image (docs/kvm-validation.md). Elsewhere they
// skip, saying what is missing; NSYS_CORTEX_REQUIRE_FIRECRACKER=1 makes
// that a failure.

// realConfig is the configuration of this host's real Firecracker, its
// jails under home.
func realConfig(t testing.TB, home string) Config {
	t.Helper()
	lay, err := layout.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromEnv(lay)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(context.Background(), cfg, runKVMProbe); !c.OK {
		if os.Getenv("NSYS_CORTEX_REQUIRE_FIRECRACKER") == "1" {
			t.Fatalf("firecracker mode is required here but %s", c.Summary)
		}
		t.Skipf("no real Firecracker VMs here: %s", c.Summary)
	}
	cfg.ChrootBase = filepath.Join(home, "jail")
	return cfg
}

type realHome struct {
	env sandbox.Env
	cfg Config
	mgr *Manager
}

func newRealHome(t testing.TB) *realHome {
	t.Helper()
	base := sandboxtest.ShortTempDir(t)
	lay, err := layout.New(filepath.Join(base, "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	h := &realHome{env: sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return "in the initramfs", nil }}}
	h.cfg = realConfig(t, lay.Home)
	h.mgr, err = New(h.env, WithConfig(h.cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sandboxtest.DestroyAll(h.mgr)
		h.mgr.Close()
	})
	return h
}

func TestConformanceKVM(t *testing.T) {
	sandboxtest.Run(t, kvmConformance(t))
}

// A restored VM has its files and its running processes as they were at
// the snapshot, a clock that is right, and randomness of its own: two
// restores of one snapshot do not read the same bytes from /dev/urandom.
func TestSnapshotterKVM(t *testing.T) {
	sandboxtest.RunSnapshotter(t, kvmConformance(t))
}

// A fork runs on with its source's processes and files, under its own id
// and secret, with randomness of its own.
func TestForkerKVM(t *testing.T) {
	sandboxtest.RunForker(t, kvmConformance(t))
}

// kvmConformance is the suites' configuration over this host's real
// Firecracker (skipping where there is none).
func kvmConformance(t *testing.T) sandboxtest.Config {
	realConfig(t, t.TempDir())
	return sandboxtest.Config{
		New: func(e sandbox.Env) sandbox.Manager {
			m, err := New(e, WithConfig(realConfig(t, e.Layout.Home)))
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		Env: func(t testing.TB) sandbox.Env {
			return sandbox.Env{AgentBinary: func() (string, error) { return "in the initramfs", nil }}
		},
		OwnKernel:    true,
		ChannelDir:   boot.VMChannelDir,
		EscapeExempt: map[string]string{sandboxtest.SeePID1: "PID 1 is the guest's init, in the guest's own kernel"},
	}
}

// Twenty VMs at once, then nothing left: no Firecracker, no jail, no cgroup.
func TestKVMTwentyVMs(t *testing.T) {
	h := newRealHome(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			if _, err := h.mgr.Create(ctx, id, sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 256 << 20}}); err != nil {
				errs <- err
				return
			}
			c, err := h.mgr.Connect(ctx, id)
			if err != nil {
				errs <- err
				return
			}
			if res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"cat", "/proc/sys/kernel/random/boot_id"}}}); err != nil || res.ExitCode != 0 {
				errs <- fmt.Errorf("%s: %v %+v", id, err, res)
			}
		}(fmt.Sprintf("vm%02d", i))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, _ := h.mgr.List(ctx)
	for _, st := range all {
		if err := h.mgr.Destroy(ctx, st.ID, sandbox.DestroyOptions{Wipe: true}); err != nil {
			t.Error(err)
		}
	}
	if r := h.mgr.rt.scan(h.env.Layout); len(r) > 0 {
		t.Errorf("Firecracker processes left: %+v", r)
	}
	if entries, _ := filepath.Glob(filepath.Join(h.cfg.ChrootBase, "*", "*")); len(entries) > 0 {
		t.Errorf("jails left: %v", entries)
	}
	if entries, _ := filepath.Glob(filepath.Join(h.cfg.CgroupRoot, ParentCgroup, h.env.Layout.Tag()+"-*")); len(entries) > 0 {
		t.Errorf("cgroups left: %v", entries)
	}
}

// BenchmarkKVMColdBoot: Create to the agent's first answer.
func BenchmarkKVMColdBoot(b *testing.B) {
	h := newRealHome(b)
	ctx := context.Background()
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		b.StartTimer()
		if _, err := h.mgr.Create(ctx, "boot", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 256 << 20}}); err != nil {
			b.Fatal(err)
		}
		c, err := h.mgr.Connect(ctx, "boot")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Health(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		h.mgr.Destroy(ctx, "boot", sandbox.DestroyOptions{})
	}
}

// BenchmarkKVMRestore: Restore (the running VM replaced) to the agent's
// first answer, with the VMM's memory beyond guest memory reported.
func BenchmarkKVMRestore(b *testing.B) {
	h := newRealHome(b)
	ctx := context.Background()
	if _, err := h.mgr.Create(ctx, "r", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 256 << 20}}); err != nil {
		b.Fatal(err)
	}
	if _, err := h.mgr.Snapshot(ctx, "r", "s"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var st *sandbox.State
	for i := 0; i < b.N; i++ {
		r, err := h.mgr.RestoreVM(ctx, "r", "s")
		if err != nil {
			b.Fatal(err)
		}
		c, err := h.mgr.Connect(ctx, "r")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Health(ctx); err != nil {
			b.Fatal(err)
		}
		st = r.State
	}
	b.StopTimer()
	if kib, err := vmmOverheadKiB(st.PID, 256<<20); err == nil {
		b.ReportMetric(float64(kib)/1024, "MiB-vmm-overhead")
	}
}

// vmmOverheadKiB is the resident memory of Firecracker outside the guest
// memory mapping (the one mapping of exactly guestBytes).
func vmmOverheadKiB(pid int, guestBytes int64) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total, size int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "Size:" {
			size, _ = strconv.ParseInt(fields[1], 10, 64)
		}
		if len(fields) >= 2 && fields[0] == "Rss:" && size*1024 != guestBytes {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			total += n
		}
	}
	return total, sc.Err()
}
