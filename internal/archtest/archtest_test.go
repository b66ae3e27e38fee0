// Package archtest checks the import rules of DESIGN.md ("Layers") and
// docs/architecture.md on every build of the tests: every package has a
// layer and imports only what its layer may see, so a broken rule fails
// `go test` and not only review.
package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/nsys-cortex/cortex"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func under(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// backend returns the sandbox backend a package belongs to ("" if none).
func backend(p string) string {
	rest, ok := strings.CutPrefix(p, mod+"/internal/sandbox/")
	if !ok {
		return ""
	}
	b, _, _ := strings.Cut(rest, "/")
	if b == "sandboxtest" || b == "internal" || b == "pool" {
		return ""
	}
	return b
}

// Layer is a level of DESIGN.md's layering (docs/architecture.md).
type Layer int

// The layers, bottom up.
const (
	Foundation Layer = iota
	Neuron
	Projection
	Execution
	Edge
	Cmd
)

var layerNames = [...]string{"foundation", "neuron", "projection", "execution", "edge", "cmd"}

func (l Layer) String() string { return layerNames[l] }

// layers gives every package its layer, by the path it is under (the
// longest that matches). A new package without a layer fails
// TestEveryPackageHasALayer: add it here and to docs/architecture.md.
var layers = map[string]Layer{
	"internal/protocol": Foundation, "internal/layout": Foundation, "internal/ids": Foundation,
	"internal/faultpoint": Foundation,
	"internal/portsign":   Foundation,
	"internal/podtoken":   Foundation,
	"internal/waittest":   Foundation, // test helpers, standard library only: any layer's tests use them

	"internal/agent": Neuron,

	"internal/ctxfs": Projection,

	"internal/sandbox": Execution, "internal/link": Execution, "internal/hostfs": Execution, "internal/transfer": Execution,
	"internal/store": Execution, "internal/archive": Execution, "internal/treediff": Execution, "internal/labels": Execution, "internal/events": Execution, "internal/keeper": Execution,
	"internal/policy": Execution, "internal/gate": Execution, "internal/apikey": Execution, "internal/term": Execution, "internal/tools": Execution,
	"internal/launch": Execution, "internal/model": Execution, "internal/image": Execution, "internal/vmimage": Execution,
	"internal/agentbin": Execution, "internal/fullbin": Execution, "internal/config": Execution, "internal/logging": Execution,

	"client": Edge, "internal/cli": Edge, "internal/api": Edge, "internal/mcp": Edge, "internal/ctxsource": Edge,
	"internal/chatrun": Edge, "internal/loop": Edge, "internal/llm": Edge, "internal/session": Edge, "internal/prompt": Edge,
	"internal/e2b": Edge,

	"cmd": Cmd,
}

// testOnly are packages with no code but tests: they need no layer.
var testOnly = map[string]bool{mod + "/internal/archtest": true}

// exempt are imports across the rules that are allowed, each with why.
var exempt = map[[2]string]string{
	{mod + "/internal/sandbox/firecracker/internal/fakefc", mod + "/internal/agent"}: "the fake Firecracker the backend's tests run is a guest: it runs the real agent in its own process",
	{mod + "/internal/sandbox/kube/kubesim", mod + "/internal/agent"}:                "the simulated kubelet kube mode's tests run is a node: it runs the real agent for each pod",
}

// layerOf returns the layer of package p.
func layerOf(p string) (Layer, bool) {
	best, layer, ok := -1, Foundation, false
	for prefix, l := range layers {
		if under(p, mod+"/"+prefix) && len(prefix) > best {
			best, layer, ok = len(prefix), l, true
		}
	}
	return layer, ok
}

// mayImport says whether a package of layer from may import one of layer
// to: down only; the neuron side and the projection see the foundation
// alone; nothing sees the neuron side but itself and cmd/.
func mayImport(from, to Layer) bool {
	switch {
	case to == Cmd:
		return false
	case from == Neuron || from == Projection:
		return to == Foundation || to == from
	case to == Neuron:
		return from == Cmd
	}
	return to <= from
}

func TestEveryPackageHasALayer(t *testing.T) {
	for _, p := range list(t, "../../...") {
		if _, ok := layerOf(p.ImportPath); !ok && !testOnly[p.ImportPath] {
			t.Errorf("%s has no layer: give it one in archtest's layers and docs/architecture.md", p.ImportPath)
		}
	}
}

func TestImportRules(t *testing.T) {
	for _, p := range list(t, "../../...") {
		from, _ := layerOf(p.ImportPath)
		for _, imp := range p.Imports {
			if !under(imp, mod) {
				continue
			}
			to, _ := layerOf(imp)
			if _, ok := exempt[[2]string{p.ImportPath, imp}]; !ok && !mayImport(from, to) {
				t.Errorf("%s (%s) imports %s (%s): dependencies point down, and only cmd/ sees the neuron side", p.ImportPath, from, imp, to)
			}
			if under(p.ImportPath, mod+"/internal/ctxfs") && (under(imp, mod+"/internal/sandbox") || under(imp, mod+"/internal/link") ||
				under(imp, mod+"/internal/loop") || under(imp, mod+"/internal/llm")) {
				t.Errorf("%s (FUSE projection) imports %s", p.ImportPath, imp)
			}
			if b1, b2 := backend(p.ImportPath), backend(imp); b1 != "" && b2 != "" && b1 != b2 {
				t.Errorf("backend %s imports backend %s", b1, b2)
			}
		}
	}
}

// The rules themselves: what each layer may see.
func TestMayImport(t *testing.T) {
	for _, tc := range []struct {
		from, to Layer
		want     bool
	}{
		{Edge, Execution, true}, {Execution, Edge, false}, {Execution, Projection, true}, {Execution, Neuron, false},
		{Projection, Execution, false}, {Projection, Foundation, true}, {Neuron, Foundation, true}, {Neuron, Execution, false},
		{Foundation, Foundation, true}, {Foundation, Neuron, false}, {Cmd, Neuron, true}, {Edge, Cmd, false}, {Cmd, Cmd, false},
	} {
		if got := mayImport(tc.from, tc.to); got != tc.want {
			t.Errorf("mayImport(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

// The agent ships inside every neuron: it stays small and static.
func TestAgentStaysSmall(t *testing.T) {
	deps := list(t, "-deps", mod+"/cmd/cortex-agent")
	if len(deps) < 10 {
		t.Fatalf("go list -deps found only %d packages", len(deps))
	}
	for _, d := range deps {
		for _, heavy := range []string{"github.com/anthropics", "github.com/openai", "google.golang.org/genai", "github.com/hanwen/go-fuse",
			"github.com/modelcontextprotocol", "github.com/docker", "github.com/moby", "k8s.io", "github.com/spf13",
			"github.com/prometheus", "net/http"} {
			if under(d.ImportPath, heavy) {
				t.Errorf("cmd/cortex-agent depends on %s", d.ImportPath)
			}
		}
	}
}

// TestLightProgramLinksNothingHeavy: the light build of nsys-cortex
// (internal/cli/split.go), which runs every command but the few that need
// them, links none of the packages whose initialisation is what made the
// CLI slow to start. cmd/nsys-cortex's TestStartIsLight measures the
// start itself.
func TestLightProgramLinksNothingHeavy(t *testing.T) {
	deps := list(t, "-deps", "-tags", "cortex_light", mod+"/cmd/nsys-cortex")
	if len(deps) < 50 {
		t.Fatalf("go list -deps found only %d packages", len(deps))
	}
	for _, d := range deps {
		if d.ImportPath == mod+"/internal/tools/redact" {
			// The launch receipts' masking: standard library only, and its
			// patterns compile when first used (0.06 ms of init).
			continue
		}
		for _, heavy := range heavyPackages {
			if under(d.ImportPath, heavy) {
				t.Errorf("the light nsys-cortex depends on %s", d.ImportPath)
			}
		}
	}
}

// heavyPackages are the module paths only the full program may link: the
// chat's renderer, the LLM vendors' SDKs and what they pull in, MCP, FUSE,
// metrics, SQLite, the HTTP API, the agent loop, and the archives'
// compression.
var heavyPackages = []string{
	"github.com/charmbracelet/glamour", "github.com/alecthomas/chroma", "github.com/microcosm-cc/bluemonday",
	"github.com/anthropics", "github.com/openai", "google.golang.org/genai", "google.golang.org/grpc",
	"google.golang.org/protobuf", "connectrpc.com", "github.com/modelcontextprotocol", "github.com/hanwen/go-fuse",
	"github.com/prometheus", "modernc.org/sqlite", "go.yaml.in/yaml", "k8s.io", "sigs.k8s.io",
	mod + "/internal/api", mod + "/internal/chatrun", mod + "/internal/loop", mod + "/internal/mcp",
	mod + "/internal/tools", mod + "/internal/ctxsource", mod + "/internal/e2b",
	"github.com/klauspost/compress", // the archives' zstd: export and import are the full program's
}
