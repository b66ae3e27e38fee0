package docker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// fakePauseCLI is a docker client that records each call's argv in
// calls and fails the first fails "pause" calls with stderr's words.
func fakePauseCLI(t *testing.T, fails int, stderr string) (calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	script := "#!/bin/sh\n" +
		"echo \"$*\" >> " + calls + "\n" +
		"n=$(grep -c '^pause ' " + calls + ")\n" +
		"if [ \"$1\" = pause ] && [ \"$n\" -le " + strconv.Itoa(fails) + " ]; then echo '" + stderr + "' >&2; exit 1; fi\n"
	bin := filepath.Join(dir, "docker")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvDockerCLI, bin)
	return calls
}

// TestFreezeRetriesUnableToFreeze: runc's "unable to freeze" (it gave up
// and thawed the container back) is asked again, up to freezeTries in
// all; any other failure is answered at once.
func TestFreezeRetriesUnableToFreeze(t *testing.T) {
	defer func(b time.Duration) { freezeBackoff = b }(freezeBackoff)
	freezeBackoff = time.Millisecond
	lay, err := layout.New(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	r := &runtime{}
	const unable = "Error response from daemon: Cannot pause container c: OCI runtime pause failed: unable to freeze: unknown"
	pauses := func(calls string) int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "pause ")
	}

	calls := fakePauseCLI(t, 2, unable)
	if err := r.Freeze(context.Background(), lay, "n1", nil); err != nil {
		t.Errorf("two refusals, then a freeze: %v", err)
	}
	if n := pauses(calls); n != 3 {
		t.Errorf("docker pause ran %d times, want 3", n)
	}

	calls = fakePauseCLI(t, 100, unable)
	if err := r.Freeze(context.Background(), lay, "n1", nil); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
		t.Errorf("runc never freezing it: %v", err)
	}
	if n := pauses(calls); n != freezeTries {
		t.Errorf("docker pause ran %d times, want %d", n, freezeTries)
	}

	calls = fakePauseCLI(t, 100, "Error response from daemon: No such container: c")
	if err := r.Freeze(context.Background(), lay, "n1", nil); err == nil || !strings.Contains(err.Error(), "No such container") {
		t.Errorf("a container that is gone: %v", err)
	}
	if n := pauses(calls); n != 1 {
		t.Errorf("docker pause of a container that is gone ran %d times, want 1", n)
	}
}
