package firecracker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/kvmprobe"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// TestMain lets this test binary be the fake jailer and the fake
// Firecracker: the backend starts it under those names.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "jailer":
		fakefc.JailerMain()
		return
	case "firecracker":
		fakefc.FirecrackerMain()
		return
	}
	os.Exit(m.Run())
}

// fakeKVM stands in for the KVM probe where the backend runs against the
// fake Firecracker, which needs no KVM. (The real probe is tested in
// kvmprobe and, failing here, in TestCreateRefusedWithoutKVM.)
func fakeKVM(context.Context, string) kvmprobe.Result {
	return kvmprobe.Result{OK: true, Detail: "fake Firecracker: no KVM needed"}
}

// fixture is a home directory whose firecracker mode runs the fakes.
type fixture struct {
	t    testing.TB
	base string
	lay  layout.Layout
	cfg  Config
	env  sandbox.Env
	fake fakefc.Config
	mgr  *Manager
	ctx  context.Context
}

// requireRoot skips where the backend cannot run its jail: it stages
// files for, and hands them to, the neuron's own uid.
func requireRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("the firecracker backend needs root: the jailer chroots and drops to the neuron's uid, and staging hands files to it")
	}
}

func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	return newFixtureWith(t, nil, opts...)
}

// newFixtureWith lets the test change the fake's configuration.
func newFixtureWith(t testing.TB, fake func(*fakefc.Config), opts ...Option) *fixture {
	t.Helper()
	requireRoot(t)
	base := sandboxtest.ShortTempDir(t)
	lay, err := layout.New(filepath.Join(base, "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, base: base, lay: lay}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(base, "bin")
	must(os.MkdirAll(bin, 0o755))
	self, err := os.Executable()
	must(err)
	for _, name := range []string{"jailer", "firecracker"} {
		must(os.Symlink(self, filepath.Join(bin, name)))
	}
	spec, err := filepath.Abs(specPath)
	must(err)
	f.fake = fakefc.Config{Spec: spec, CallsDir: filepath.Join(base, "calls"), GuestRoot: filepath.Join(base, "guest"),
		BootDelayMs: 100, CgroupRoot: filepath.Join(base, "cgroup"), CtlLog: filepath.Join(base, "ctl.jsonl")}
	if fake != nil {
		fake(&f.fake)
	}
	b, _ := json.Marshal(f.fake)
	must(os.WriteFile(filepath.Join(bin, fakefc.ConfigFile), b, 0o644))
	must(os.MkdirAll(f.fake.CgroupRoot, 0o755))
	must(os.WriteFile(filepath.Join(f.fake.CgroupRoot, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids\n"), 0o644))
	img := filepath.Join(base, "img")
	must(os.MkdirAll(img, 0o755))
	for _, name := range []string{"vmlinux", "initramfs.img", "rootfs.ext4"} {
		must(os.WriteFile(filepath.Join(img, name), []byte("image "+name), 0o644))
	}
	f.cfg = Config{Firecracker: filepath.Join(bin, "firecracker"), Jailer: filepath.Join(bin, "jailer"),
		Kernel: filepath.Join(img, "vmlinux"), Initrd: filepath.Join(img, "initramfs.img"), RootDisk: filepath.Join(img, "rootfs.ext4"),
		ChrootBase: filepath.Join(lay.Home, "jail"), CgroupRoot: f.fake.CgroupRoot, KVMDevice: "/dev/kvm", OverlaySize: 64 << 20}
	f.env = sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return "/the/initramfs/has/cortex-agent", nil }}
	f.mgr = f.manager(opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	f.ctx = ctx
	t.Cleanup(func() {
		sandboxtest.DestroyAll(f.mgr)
		f.mgr.Close()
		cancel()
	})
	return f
}

// manager is another manager over the fixture's home: another host process.
func (f *fixture) manager(opts ...Option) *Manager {
	m, err := New(f.env, append([]Option{WithConfig(f.cfg), WithKVMProbe(fakeKVM)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { m.Close() })
	return m
}

// calls returns "METHOD /path" of every API call neuron id's processes got.
func (f *fixture) calls(id string) []fakefc.Call {
	c, err := fakefc.ReadCalls(f.fake.CallsDir, JailID(f.lay, id))
	if err != nil {
		f.t.Fatalf("calls of %s: %v", id, err)
	}
	return c
}

func callNames(calls []fakefc.Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.String()
		if c.Status/100 != 2 {
			out[i] += " -> " + c.Fault
		}
	}
	return out
}

// ctl returns the control requests neuron id's guests got.
func (f *fixture) ctl(id string) []fakefc.CtlRecord {
	all, _ := fakefc.ReadCtl(f.fake.CtlLog)
	var out []fakefc.CtlRecord
	for _, r := range all {
		if r.Instance == JailID(f.lay, id) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fixture) jail(id string) jail {
	j, err := f.mgr.rt.jailOf(f.lay, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}
