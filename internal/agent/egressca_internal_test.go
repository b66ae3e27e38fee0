package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/egressca"
)

// The agent writes its proxy's authority and a bundle with it where the
// neuron's programs look; it refuses a PEM that is not one authority,
// and follows no link planted where a file goes.
func TestWriteEgressCA(t *testing.T) {
	cert, key, err := egressca.New([]string{"api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeEgressCA(dir, cert); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "egress-ca.pem"))
	if err != nil || !bytes.Equal(ca, cert) {
		t.Errorf("egress-ca.pem: %q %v", ca, err)
	}
	bundle, err := os.ReadFile(filepath.Join(dir, "ca-bundle.pem"))
	if err != nil || !bytes.HasSuffix(bundle, cert) {
		t.Errorf("ca-bundle.pem does not end with the authority: %v", err)
	}
	for name, bad := range map[string][]byte{"nothing": nil, "a key": key, "two": append(append([]byte{}, cert...), cert...)} {
		if err := writeEgressCA(t.TempDir(), bad); err == nil {
			t.Errorf("%s taken as the authority", name)
		}
	}
	planted := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("kept"), 0o644)
	if err := os.Symlink(target, filepath.Join(planted, "egress-ca.pem")); err != nil {
		t.Fatal(err)
	}
	if err := writeEgressCA(planted, cert); err == nil {
		t.Error("written through a link")
	}
	if b, _ := os.ReadFile(target); string(b) != "kept" {
		t.Errorf("the link's target was written: %q", b)
	}
}
