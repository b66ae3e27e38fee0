package boot

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A descriptor this process holds without close-on-exec — inherited from
// a shell, or opened by a library without O_CLOEXEC — reaches no child
// after CloseOnExec; one handed over explicitly still does.
func TestCloseOnExec(t *testing.T) {
	secret, err := os.CreateTemp(t.TempDir(), "secret")
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(secret.Fd())) // dup: no close-on-exec
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	handed, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer handed.Close()
	children := func() string {
		out, err := exec.Command("sh", "-c", "ls /proc/self/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		return " " + strings.Join(strings.Fields(string(out)), " ") + " "
	}
	leak := " " + strconv.Itoa(fd) + " "
	if !strings.Contains(children(), leak) {
		t.Skipf("the dup'ed descriptor %d did not reach a child even before: nothing to test", fd)
	}
	CloseOnExec()
	if got := children(); strings.Contains(got, leak) {
		t.Errorf("descriptor %d still reaches a child: %s", fd, got)
	}
	cmd := exec.Command("sh", "-c", "ls /proc/self/fd")
	cmd.ExtraFiles = []*os.File{handed}
	out, err := cmd.Output()
	if err != nil || !strings.Contains(" "+strings.Join(strings.Fields(string(out)), " ")+" ", " 3 ") {
		t.Errorf("a descriptor handed over (ExtraFiles) did not reach the child: %q %v", out, err)
	}
}
