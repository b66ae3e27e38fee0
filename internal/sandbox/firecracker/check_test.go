package firecracker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/kvmprobe"
)

func item(c sandbox.Check, name string) sandbox.CheckItem {
	for _, it := range c.Items {
		if it.Name == name {
			return it
		}
	}
	return sandbox.CheckItem{Name: name, Detail: "(no such item)"}
}

// With the fakes in place every requirement passes; each one taken away
// fails the check with a summary naming it.
func TestSelfCheckNamesWhatIsMissing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if c := check(ctx, f.cfg, fakeKVM); !c.OK || !strings.Contains(c.Summary, "Firecracker v"+PinnedVersion) {
		t.Fatalf("with everything there: %+v", c)
	}
	dir := t.TempDir()
	oldJailer := filepath.Join(dir, "jailer")
	os.WriteFile(oldJailer, []byte("#!/bin/sh\necho 'Jailer v1.9.0'\n"), 0o755)
	oldFC := filepath.Join(dir, "firecracker")
	os.WriteFile(oldFC, []byte("#!/bin/sh\necho 'Firecracker v1.7.0'\n"), 0o755)
	nextMajor := filepath.Join(dir, "firecracker2")
	os.WriteFile(nextMajor, []byte("#!/bin/sh\necho 'Firecracker v2.0.0'\n"), 0o755)
	noKVM := func(context.Context, string) kvmprobe.Result {
		return kvmprobe.Result{Stage: "timeout", Detail: "KVM_RUN did not return within 1s"}
	}
	for name, c := range map[string]struct {
		mod   func(*Config)
		probe KVMProbe
		item  string
		says  string
	}{
		"kvm":             {nil, noKVM, "KVM", "KVM_RUN did not return"},
		"no firecracker":  {func(c *Config) { c.Firecracker = filepath.Join(dir, "none") }, nil, "firecracker", EnvFirecracker},
		"old firecracker": {func(c *Config) { c.Firecracker = oldFC }, nil, "firecracker", "v1.7.0"},
		"firecracker 2":   {func(c *Config) { c.Firecracker = nextMajor }, nil, "firecracker", "v2.0.0"},
		"no jailer":       {func(c *Config) { c.Jailer = filepath.Join(dir, "none") }, nil, "jailer", EnvJailer},
		"other jailer":    {func(c *Config) { c.Jailer = oldJailer }, nil, "jailer", "same release"},
		"no kernel":       {func(c *Config) { c.Kernel = filepath.Join(dir, "vmlinux") }, nil, "guest image", "kernel " + filepath.Join(dir, "vmlinux")},
		"no root disk":    {func(c *Config) { c.RootDisk = dir }, nil, "guest image", "root disk"},
		"no cgroup v2":    {func(c *Config) { c.CgroupRoot = dir }, nil, "cgroup v2", "no cgroup v2"},
	} {
		cfg := f.cfg
		if c.mod != nil {
			c.mod(&cfg)
		}
		probe := c.probe
		if probe == nil {
			probe = fakeKVM
		}
		got := check(ctx, cfg, probe)
		it := item(got, c.item)
		if got.OK || it.OK || !strings.Contains(it.Detail, c.says) || !strings.Contains(got.Summary, c.item+": ") {
			t.Errorf("%s: check %+v; item %+v, want it failing with %q", name, got.Summary, it, c.says)
		}
	}
	os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpuset io pids\n"), 0o644)
	cfg := f.cfg
	cfg.CgroupRoot = dir
	if it := item(check(ctx, cfg, fakeKVM), "cgroup v2"); it.OK || !strings.Contains(it.Detail, "memory and cpu") {
		t.Errorf("cgroups without memory and cpu: %+v", it)
	}
}

// On a machine whose KVM does not run guests (this one: nested
// virtualization emulated at ~2 M instructions/s), Create refuses with the
// real probe's reason and makes nothing.
func TestCreateRefusedWithoutKVM(t *testing.T) {
	f := newFixture(t)
	r := runKVMProbe(context.Background(), f.cfg.KVMDevice)
	if r.OK {
		t.Skipf("KVM runs guests here (%s): nothing to refuse", r.Detail)
	}
	m, err := New(f.env, WithConfig(f.cfg)) // the real probe
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Create(f.ctx, "nokvm", sandbox.CreateOptions{})
	var u *sandbox.UnavailableError
	if !errors.As(err, &u) || u.Mode != Mode || !strings.Contains(err.Error(), "KVM: "+r.Detail) {
		t.Fatalf("got %v, want the mode unavailable because of KVM (%s)", err, r.Detail)
	}
	if exists(f.lay.OverlayDir("nokvm")) || exists(f.cfg.ChrootBase) {
		t.Error("a refused create left an overlay or a jail")
	}
	if c := m.Check(f.ctx); c.OK || item(c, "KVM").OK {
		t.Errorf("the manager's check passes without KVM: %+v", c)
	}
}
