package process_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

var agentBin string

func TestMain(m *testing.M) {
	if mode := os.Getenv("CORTEX_FAKE_AGENT"); mode != "" {
		fakeAgent(mode)
	}
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = bin
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

func env(t testing.TB) sandbox.Env {
	return sandbox.Env{AgentBinary: func() (string, error) { return agentBin, nil }}
}

// conformance is process mode's configuration of the shared suites.
var conformance = sandboxtest.Config{
	New:        func(e sandbox.Env) sandbox.Manager { return process.New(e) },
	Env:        env,
	Confined:   true,
	Unconfined: "process mode isolates nothing: its commands run as the host user, on the host",
	Lacks:      map[string]string{"pause --to-disk": "its memory is the host's"},
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, conformance)
}

func TestLifecycle(t *testing.T) {
	sandboxtest.RunLifecycle(t, conformance)
}

func TestFork(t *testing.T) {
	sandboxtest.RunForker(t, conformance)
}

func TestPorts(t *testing.T) {
	sandboxtest.RunPorts(t, conformance)
}

func TestExport(t *testing.T) {
	sandboxtest.RunExporter(t, conformance)
}

func TestDiff(t *testing.T) {
	sandboxtest.RunDiffer(t, conformance)
}
