package qemu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/image"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/qemu"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

var (
	agentBin string
	// vmImage is the busybox VM image the tests boot, built once per test
	// binary from this tree's agent and the host's kernel.
	vmImage = sync.OnceValues(buildImage)
	tmpDirs []string
)

func TestMain(m *testing.M) {
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = bin
	code := m.Run()
	for _, d := range tmpDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// buildImage makes the test image: a busybox root, the host's kernel.
func buildImage() (string, error) {
	if c := qemu.SelfCheck(context.Background(), sandbox.Env{}); !c.Items[0].OK || !c.Items[1].OK {
		return "", fmt.Errorf("%s; %s", c.Items[0].Detail, c.Items[1].Detail)
	}
	if _, _, err := vmimage.HostKernel(); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "cxvm")
	if err != nil {
		return "", err
	}
	tmpDirs = append(tmpDirs, dir)
	var log strings.Builder
	root := filepath.Join(dir, "root")
	if err := image.Build(context.Background(), image.Options{RootFS: root, Agent: agentBin, Test: true, Log: &log}); err != nil {
		return "", fmt.Errorf("%v\n%s", err, log.String())
	}
	im, err := vmimage.Build(context.Background(), vmimage.BuildOptions{Dir: filepath.Join(dir, "vm"), Agent: agentBin, RootFS: root, Log: &log})
	if err != nil {
		return "", fmt.Errorf("%v\n%s", err, log.String())
	}
	return im.Dir, nil
}

// requireQEMU returns the test image, or skips saying why this machine
// cannot run qemu mode; with NSYS_CORTEX_REQUIRE_QEMU=1 (CI) it fails.
func requireQEMU(t testing.TB) string {
	t.Helper()
	dir, err := vmImage()
	if err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_QEMU") == "1" {
			t.Fatalf("qemu mode cannot run here: %v", err)
		}
		t.Skipf("qemu mode cannot run here: %v", err)
	}
	return dir
}

func env(t testing.TB) sandbox.Env {
	return sandbox.Env{AgentBinary: func() (string, error) { return agentBin, nil }}
}

// killGuestAgent kills the agent inside the VM, through the channel, as
// its own commands could: the guest's PID 1 then syncs and resets the VM.
func killGuestAgent(t *testing.T, st *sandbox.State) {
	t.Helper()
	home := filepath.Dir(filepath.Dir(filepath.Dir(st.SocketDir))) // <home>/sockets/qemu/<id>
	lay, err := layout.New(home, filepath.Dir(st.OverlayPath))
	if err != nil {
		t.Fatal(err)
	}
	m := qemu.New(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := m.Connect(ctx, st.ID)
	if err != nil {
		t.Fatalf("connect to kill the guest agent: %v", err)
	}
	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"kill", "-9", strconv.Itoa(h.PID)}}}); err != nil && !errdefs.IsNotRunning(err) {
		t.Fatalf("kill the guest agent: %v", err)
	}
}

func conformance(t testing.TB) sandboxtest.Config {
	return sandboxtest.Config{
		New:          func(e sandbox.Env) sandbox.Manager { return qemu.New(e) },
		Env:          env,
		Confined:     false,
		Kill:         killGuestAgent,
		OwnKernel:    true,
		Options:      sandbox.CreateOptions{Image: requireQEMU(t)},
		ChannelDir:   boot.VMChannelDir,
		EscapeExempt: map[string]string{sandboxtest.SeePID1: "PID 1 is the guest's init, in the guest's own kernel"},
	}
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, conformance(t))
}

// TestSnapshotter: snapshots of whole VMs (memory, processes, disk), and
// under TCG the guest's clock, which boots with the emulated RTC's whole
// seconds and is set by the host once the guest is up, and again after a
// restore.
func TestSnapshotter(t *testing.T) {
	sandboxtest.RunSnapshotter(t, conformance(t))
}

// TestFork: forks of a running VM run on with its processes, from a
// whole-machine snapshot restored under each fork's id.
func TestFork(t *testing.T) {
	sandboxtest.RunForker(t, conformance(t))
}

// TestPorts: the guest's own loopback, reached through the channel.
func TestPorts(t *testing.T) {
	sandboxtest.RunPorts(t, conformance(t))
}

// TestExport: the VM's overlay disk, exported sparse and imported.
func TestExport(t *testing.T) {
	sandboxtest.RunExporter(t, conformance(t))
}

var _ = link.NoTimeout
