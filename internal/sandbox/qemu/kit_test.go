package qemu_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/qemu"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// TestToolKitSnapshot: the tool kit's snapshot tool (and with it the
// chat's checkpoints, /ctx's "snapshot NAME" and nsys-cortex snapshot,
// which share tools.SetNeuron) saves a VM neuron whole through its
// manager and restores it: the file is back, and so is the process that
// ran. A copy of files is refused without touching the VM.
func TestToolKitSnapshot(t *testing.T) {
	img := requireQEMU(t)
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	set := sandbox.NewSet(e, qemu.Backend())
	m, err := set.Manager(qemu.Mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		set.Close()
		if pids := qemuProcesses(lay, ""); len(pids) > 0 {
			t.Errorf("QEMU processes left behind: %v", pids)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := m.Create(ctx, "kit", sandbox.CreateOptions{Image: img}); err != nil {
		t.Fatal(err)
	}
	n := tools.NewSetNeuron(set, lay, "kit")
	p, err := policy.Preset("standard")
	if err != nil {
		t.Fatal(err)
	}
	kit, err := tools.New(n, tools.WithPolicy(p))
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func(action, name string, wantErr bool, want ...string) {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"action": action, "name": name})
		r := kit.Call(ctx, "snapshot", in)
		if r.IsError != wantErr {
			t.Fatalf("snapshot %s %s: error %v, want %v: %s", action, name, r.IsError, wantErr, r.Text)
		}
		for _, w := range want {
			if !strings.Contains(r.Text, w) {
				t.Fatalf("snapshot %s %s: want %q in %q", action, name, w, r.Text)
			}
		}
	}

	c, err := n.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "state.txt", []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	bg, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Shell: "while :; do sleep 0.2; done"}})
	if err != nil {
		t.Fatal(err)
	}
	snapshot("create", "s1", false, `snapshot "s1" created: the whole VM`)
	snapshot("list", "", false, "s1", "whole VM")

	if _, err := store.CreateSnapshot(lay.SnapshotsDir("kit"), "files", "kit", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	snapshot("restore", "files", true, "is a copy of files")
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("a refused restore touched the VM: %v", err)
	}

	if err := c.WriteFile(ctx, "state.txt", []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "later.txt", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	snapshot("restore", "s1", false, `restored snapshot "s1": the whole VM`, "processes")
	c2, err := n.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c2 == c {
		t.Fatal("the neuron kept its channel to the VM the restore replaced")
	}
	wantRestored(t, ctx, c2, bg.PID)
}
