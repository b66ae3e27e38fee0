//go:build !cortex_light

package cli

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
)

// TestMountCommand runs nsys-cortex mount in a child process and stops it
// with nsys-cortex umount.
func TestMountCommand(t *testing.T) {
	if dir := os.Getenv("CORTEX_TEST_MOUNT"); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		a := &App{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: strings.NewReader(""), Backends: []sandbox.Backend{process.Backend()}}
		os.Exit(a.Run(ctx, []string{"mount", dir}))
	}
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs /dev/fuse and root (to mount with allow_other)")
	}
	home := t.TempDir()
	t.Setenv("NSYS_CORTEX_HOME", home)
	base, err := os.MkdirTemp("", "ctx-cli-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "ctx")
	child := exec.Command(os.Args[0], "-test.run=^TestMountCommand$")
	child.Env = append(os.Environ(), "CORTEX_TEST_MOUNT="+dir)
	stderr, _ := child.StderrPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "mounted at "+dir) || !strings.Contains(line, "validated") {
		t.Fatalf("mount said %q, %v", line, err)
	}
	out, err := exec.Command("cat", filepath.Join(dir, ctxmount.MagicName)).Output()
	if err != nil || !strings.HasPrefix(string(out), "cortexfs 1 ") {
		t.Fatalf("magic file: %q, %v", out, err)
	}
	if out, err := exec.Command("ls", filepath.Join(dir, "neurons")).Output(); err != nil || len(out) != 0 {
		t.Fatalf("ls neurons: %q, %v", out, err)
	}
	var so, se bytes.Buffer
	a := &App{Stdout: &so, Stderr: &se, Stdin: strings.NewReader(""), Backends: []sandbox.Backend{process.Backend()}}
	if code := a.Run(context.Background(), []string{"umount", dir}); code != 0 {
		t.Fatalf("umount: %d %s", code, se.String())
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("mount exited: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("mount did not exit after umount")
	}
	if m, ok := ctxmount.MountAt(dir); ok {
		t.Errorf("still mounted: %+v", m)
	}
}
