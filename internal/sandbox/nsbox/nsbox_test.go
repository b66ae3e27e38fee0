package nsbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

var agentBin string

func TestMain(m *testing.M) {
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = bin
	os.Exit(m.Run())
}

func env(t testing.TB) sandbox.Env {
	return sandbox.Env{AgentBinary: func() (string, error) { return agentBin, nil }}
}

// requireNsbox skips (saying why) where this machine cannot run nsbox; in
// CI it can, and .ci/run makes sure nothing skips there.
func requireNsbox(t testing.TB) {
	e := env(t)
	e.Layout.Home = sandboxtest.ShortTempDir(t)
	e.Layout.Overlays = e.Layout.Home
	if c := nsbox.SelfCheck(context.Background(), e); !c.OK {
		if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" {
			t.Fatalf("nsbox cannot run here: %s", c.Summary)
		}
		t.Skipf("nsbox cannot run here: %s", c.Summary)
	}
}

// conformance is nsbox's configuration of the shared suites.
var conformance = sandboxtest.Config{
	New:        func(e sandbox.Env) sandbox.Manager { return nsbox.New(e) },
	Env:        env,
	Confined:   false,
	ChannelDir: nsbox.ChannelDir,
	Lacks:      map[string]string{"pause --to-disk": "a neuron's memory is the host's own"},
}

func TestConformance(t *testing.T) {
	requireNsbox(t)
	sandboxtest.Run(t, conformance)
}

func TestLifecycle(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunLifecycle(t, conformance)
}

func TestFork(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunForker(t, conformance)
}

// Ports: a neuron with no network at all still serves the host through
// its channel.
func TestPorts(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunPorts(t, conformance)
}

func TestExport(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunExporter(t, conformance)
}

func TestDiff(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunDiffer(t, conformance)
}

func TestExportDisk(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunExporterDisk(t, conformance)
}

func TestWarm(t *testing.T) {
	requireNsbox(t)
	sandboxtest.RunWarmer(t, conformance)
}
