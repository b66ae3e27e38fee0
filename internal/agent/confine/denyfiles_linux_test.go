package confine

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// DenyFiles leaves a process nothing of the file system: no file read,
// made, removed or run, from any of its threads, none bound to a TCP
// port; what it opened before stays open.
func TestDenyFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "kept"), []byte("kept"), 0o600)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o600)
	bin := filepath.Join(t.TempDir(), "denyfiles")
	build := exec.Command("go", "build", "-o", bin, "github.com/nsys-cortex/cortex/internal/agent/confine/testdata/denyfiles")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the child: %v\n%s", err, out)
	}
	// A port free now, for the child to try to bind.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	cmd := exec.Command(bin, dir, port)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); strings.HasPrefix(s, "SKIP ") {
		t.Skip(strings.TrimPrefix(s, "SKIP "))
	} else if s != "" {
		t.Fatal(s)
	}
	if _, err := os.Stat(filepath.Join(dir, "secret")); err != nil {
		t.Errorf("the child removed a file: %v", err)
	}
}
