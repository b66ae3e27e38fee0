// Package archtest checks the import rules of DESIGN.md ("Layers") on every
// build of the tests, so a broken rule fails `go test` and not only review.
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

var foundation = []string{mod + "/internal/protocol", mod + "/internal/layout", mod + "/internal/ids"}

func isFoundation(p string) bool {
	for _, f := range foundation {
		if under(p, f) {
			return true
		}
	}
	return false
}

// backend returns the sandbox backend a package belongs to ("" if none).
func backend(p string) string {
	rest, ok := strings.CutPrefix(p, mod+"/internal/sandbox/")
	if !ok {
		return ""
	}
	b, _, _ := strings.Cut(rest, "/")
	if b == "sandboxtest" || b == "internal" {
		return ""
	}
	return b
}

func TestImportRules(t *testing.T) {
	for _, p := range list(t, "../../...") {
		for _, imp := range p.Imports {
			if !under(imp, mod) {
				continue
			}
			switch {
			case under(imp, mod+"/cmd"):
				t.Errorf("%s imports %s: nothing imports cmd/", p.ImportPath, imp)
			case isFoundation(p.ImportPath) && !isFoundation(imp):
				t.Errorf("%s (foundation) imports %s", p.ImportPath, imp)
			case under(p.ImportPath, mod+"/internal/agent") && !isFoundation(imp) && !under(imp, mod+"/internal/agent"):
				t.Errorf("%s (neuron side) imports %s; it may import only foundation packages", p.ImportPath, imp)
			case under(p.ImportPath, mod+"/internal/ctxfs") && (under(imp, mod+"/internal/sandbox") || under(imp, mod+"/internal/link") ||
				under(imp, mod+"/internal/loop") || under(imp, mod+"/internal/llm")):
				t.Errorf("%s (FUSE projection) imports %s", p.ImportPath, imp)
			}
			if b1, b2 := backend(p.ImportPath), backend(imp); b1 != "" && b2 != "" && b1 != b2 {
				t.Errorf("backend %s imports backend %s", b1, b2)
			}
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
