package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImportDockerExitsEarly: a docker that exits without reading its
// input (no daemon) fails the import; tar is not left blocked writing into
// a pipe whose reader is gone (it was: make test hung in TestMain).
func TestImportDockerExitsEarly(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "docker")
	script := "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NSYS_CORTEX_DOCKER_CLI", fake)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// Far more than a pipe holds, so that tar must block if nothing reads.
	if err := os.WriteFile(filepath.Join(root, "big"), make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log strings.Builder
	err := Import(ctx, root, "nsys-cortex-neuron:none", "sum", &log)
	if err == nil {
		t.Fatal("import with a docker that exits at once succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("import hung until its deadline: %v", err)
	}
	if !strings.Contains(log.String(), "Cannot connect") {
		t.Errorf("docker's output is not in the log: %q (error %v)", log.String(), err)
	}
}
