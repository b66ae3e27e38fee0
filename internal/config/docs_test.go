package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the key table of docs/config.md from the schema")

const (
	docsPath   = "../../docs/config.md"
	tableBegin = "<!-- keys:begin (generated from internal/config by: go test ./internal/config -run TestDocsTable -update) -->\n"
	tableEnd   = "<!-- keys:end -->\n"
)

// docsTable is the key table of docs/config.md.
func docsTable() string {
	var b strings.Builder
	b.WriteString("| key | environment variable | type | default | meaning |\n|---|---|---|---|---|\n")
	for _, k := range Keys() {
		typ := k.Type.String()
		if k.Type == TypeEnum {
			typ = strings.Join(k.Allowed, " \\| ")
		}
		if k.Secret {
			typ += ", secret"
		}
		def := "`" + k.Default + "`"
		if k.Default == "" {
			def = "(none)"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", k.Name, k.Env, typ, def, strings.NewReplacer("|", "\\|", "<", "&lt;").Replace(k.Description))
	}
	return b.String()
}

// TestDocsTable fails when docs/config.md's key table is not the one the
// schema makes; -update rewrites it.
func TestDocsTable(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(doc, []byte(tableBegin))
	table, after, ok2 := bytes.Cut(rest, []byte(tableEnd))
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q around its key table", docsPath, tableBegin, tableEnd)
	}
	want := docsTable()
	if string(table) == want {
		return
	}
	if *update {
		out := bytes.Join([][]byte{before, []byte(tableBegin), []byte(want), []byte(tableEnd), after}, nil)
		if err := os.WriteFile(docsPath, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the key table of %s is out of date; run go test ./internal/config -run TestDocsTable -update. Want:\n%s", docsPath, want)
}
