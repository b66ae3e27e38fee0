package vminit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

func TestParseModuleParams(t *testing.T) {
	got := parseModuleParams("console=ttyS0 quiet virtio_mmio.device=4K@0xd0000000:5 virtio-mmio.x=1 ext4.y=z .bad=1 nodot=2 mod.=3")
	want := map[string]string{"virtio_mmio": "device=4K@0xd0000000:5 x=1", "ext4": "y=z"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

func TestModuleOf(t *testing.T) {
	for file, want := range map[string]string{
		"03-virtio_mmio.ko":                "virtio_mmio",
		"12-vmw_vsock_virtio_transport.ko": "vmw_vsock_virtio_transport",
		"00-virtio-ring.ko":                "virtio_ring",
		"plain.ko":                         "plain",
	} {
		if got := moduleOf(file); got != want {
			t.Errorf("%s: %q, want %q", file, got, want)
		}
	}
}

// writeConfig writes a config disk the way the host does: JSON padded
// with NULs.
func writeConfig(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.img")
	if err := os.WriteFile(p, append(b, make([]byte, 4096)...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadConfig(t *testing.T) {
	cfg, err := readConfig(writeConfig(t, boot.VMConfig{ID: "n1", Workdir: "/w", Env: []string{"A=b"}, Pids: 5, NestedUserns: true}))
	if err != nil || cfg.ID != "n1" || cfg.Workdir != "/w" || cfg.Pids != 5 || !cfg.NestedUserns || envValue(cfg.Env, "A") != "b" {
		t.Fatalf("%+v %v", cfg, err)
	}
	for name, v := range map[string]any{
		"bad id":           boot.VMConfig{ID: "../x", Workdir: "/w"},
		"relative workdir": boot.VMConfig{ID: "n1", Workdir: "w"},
		"another major":    map[string]any{"version": "2.0", "id": "n1", "workdir": "/w"},
	} {
		if _, err := readConfig(writeConfig(t, v)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A newer host of the same major version: what this guest does not
	// know is ignored, and the guest boots.
	cfg, err = readConfig(writeConfig(t, map[string]any{"version": "1.9", "id": "n1", "workdir": "/w", "token": "x"}))
	if err != nil || cfg.ID != "n1" {
		t.Fatalf("a config of a newer minor with an unknown field: %+v %v", cfg, err)
	}
	if _, err := readConfig(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "config disk") {
		t.Fatalf("a missing disk: %v", err)
	}
}
