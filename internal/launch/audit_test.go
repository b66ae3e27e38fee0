package launch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// A mirror gets each fact's line as the file does, and gets it when the
// file cannot be written too.
func TestAuditMirror(t *testing.T) {
	var mirror, bMirror bytes.Buffer // read once their writers are done
	path := filepath.Join(t.TempDir(), "logs", "audit.log")
	a := NewAudit(path)
	a.MirrorTo(&mirror)
	if err := a.Record("gate", map[string]any{"action": "exec", "effect": "allow", "neuron": "n1"}); err != nil {
		t.Fatal(err)
	}
	// A file that cannot be made (its directory is a file).
	blocked := filepath.Join(t.TempDir(), "f")
	os.WriteFile(blocked, nil, 0o600)
	b := NewAudit(filepath.Join(blocked, "audit.log"))
	b.MirrorTo(&bMirror)
	if err := b.Record("gate", map[string]any{"action": "mkdir"}); err == nil {
		t.Fatal("a file under a file was written")
	}
	ma, mb := a.mirror, b.mirror
	a.Close()
	b.Close()
	waittest.Recv(t, 30*time.Second, "the mirror's end", ma.done)
	waittest.Recv(t, 30*time.Second, "the mirror's end", mb.done)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fact map[string]any
	if err := json.Unmarshal(file, &fact); err != nil || fact["event"] != "gate" || fact["neuron"] != "n1" {
		t.Fatalf("the fact: %s, %v", file, err)
	}
	if got := mirror.String(); got != string(file) {
		t.Fatalf("the mirror: %q, the file %q", got, file)
	}
	if got := bMirror.String(); !strings.Contains(got, `"action":"mkdir"`) || !strings.HasSuffix(got, "\n") {
		t.Fatalf("the mirror of a log that cannot be written: %q", got)
	}
}

// A value an API client chose reaches the log as ASCII: terminal controls
// (C1, a bidirectional override) escaped, the same value when decoded.
func TestAuditASCII(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a := NewAudit(path)
	id := "\u009b2J\u009d52;c;x\u0007\x1b[31m\nfake\u202e😀é"
	if err := a.Record("gate", map[string]any{"neuron": id}); err != nil {
		t.Fatal(err)
	}
	line, _ := os.ReadFile(path)
	for _, c := range line[:len(line)-1] {
		if c < 0x20 || c >= 0x7f {
			t.Fatalf("byte %#x in the line %q", c, line)
		}
	}
	var fact map[string]any
	if err := json.Unmarshal(line, &fact); err != nil || fact["neuron"] != id {
		t.Fatalf("decoded: %q, %v; want %q", fact["neuron"], err, id)
	}
}

// A mirror whose writer takes nothing holds no Record: the file gets every
// fact, the mirror drops what its queue cannot hold and says how many
// once its writer takes lines again.
func TestAuditMirrorStalled(t *testing.T) {
	pr, pw := io.Pipe()
	path := filepath.Join(t.TempDir(), "audit.log")
	a := NewAudit(path)
	a.MirrorTo(pw)
	const n = mirrorQueue + 500
	recorded := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := a.Record("gate", map[string]any{"i": i}); err != nil {
				recorded <- err
				return
			}
		}
		recorded <- nil
	}()
	if err := waittest.Recv(t, 30*time.Second, "every Record, beside a mirror that takes nothing", recorded); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(path)
	if lines := bytes.Count(file, []byte("\n")); lines != n {
		t.Fatalf("the file has %d lines, want %d", lines, n)
	}
	read := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		read <- lines
	}()
	m := a.mirror
	a.Close() // waits a second at most; the queue's end is awaited here
	waittest.Recv(t, 30*time.Second, "the mirror's end", m.done)
	pw.Close()
	lines := <-read
	var facts, dropped int
	for _, l := range lines {
		var f map[string]any
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("a mirrored line: %q", l)
		}
		if f["event"] == "audit.dropped" {
			dropped += int(f["lines"].(float64))
			continue
		}
		facts++
	}
	if facts+dropped != n || dropped == 0 {
		t.Fatalf("mirrored %d facts and said %d dropped, of %d", facts, dropped, n)
	}
}
