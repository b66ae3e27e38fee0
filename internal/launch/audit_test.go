package launch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A mirror gets each fact's line as the file does, and gets it when the
// file cannot be written too.
func TestAuditMirror(t *testing.T) {
	var mirror bytes.Buffer
	path := filepath.Join(t.TempDir(), "logs", "audit.log")
	a := NewAudit(path)
	a.Mirror = &mirror
	if err := a.Record("gate", map[string]any{"action": "exec", "effect": "allow", "neuron": "n1"}); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if mirror.String() != string(file) {
		t.Fatalf("mirror %q, file %q", mirror.String(), file)
	}
	var fact map[string]any
	if err := json.Unmarshal(file, &fact); err != nil || fact["event"] != "gate" || fact["neuron"] != "n1" {
		t.Fatalf("the fact: %s, %v", file, err)
	}
	// A file that cannot be made (its directory is a file).
	blocked := filepath.Join(t.TempDir(), "f")
	os.WriteFile(blocked, nil, 0o600)
	mirror.Reset()
	b := NewAudit(filepath.Join(blocked, "audit.log"))
	b.Mirror = &mirror
	if err := b.Record("gate", map[string]any{"action": "exec"}); err == nil {
		t.Fatal("a file under a file was written")
	}
	if !bytes.Contains(mirror.Bytes(), []byte(`"action":"exec"`)) || !bytes.HasSuffix(mirror.Bytes(), []byte("\n")) {
		t.Fatalf("the mirror: %q", mirror.String())
	}
}
