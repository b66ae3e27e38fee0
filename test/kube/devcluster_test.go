package kube_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// devcluster as a person runs it: it writes the kubeconfig once the
// cluster is ready, nsys-cortex pointed at it with KUBECONFIG creates a
// neuron, runs a command in it and wipes it, and an interrupt stops
// devcluster cleanly and removes the kubeconfig and what it made.
func TestDevcluster(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "devcluster")
	if out, err := exec.Command("go", "build", "-o", bin, "./devcluster").CombinedOutput(); err != nil {
		t.Fatalf("building devcluster: %v\n%s", err, out)
	}
	cli := buildCLI(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "dev.kubeconfig")
	dc := exec.Command(bin, "--kubeconfig", kc)
	dc.Env = append(os.Environ(), "TMPDIR="+dir)
	stdout, err := dc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	dc.Stderr = &stderr
	if err := dc.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- dc.Wait() }()
	t.Cleanup(func() {
		if dc.ProcessState == nil {
			dc.Process.Kill()
			<-ended
		}
	})
	ready := make(chan string, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Interrupt to stop") {
				ready <- all.String()
			}
		}
	}()
	var banner string
	select {
	case banner = <-ready:
	case err := <-ended:
		t.Fatalf("devcluster ended before it was ready: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("devcluster not ready within 2 minutes\n%s", stderr.String())
	}
	if _, err := os.Stat(kc); err != nil {
		t.Fatalf("ready, but no kubeconfig: %v\n%s", err, banner)
	}
	if !strings.Contains(banner, "KUBECONFIG="+kc) || !strings.Contains(banner, "The pods' agents run") {
		t.Fatalf("the banner says neither how to use it nor where its pods' agents run:\n%s", banner)
	}
	if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" && !strings.Contains(banner, "each in an nsbox neuron") {
		t.Fatalf("nsbox runs here, and the pods' agents do not run in it:\n%s\n%s", banner, stderr.String())
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "NSYS_CORTEX_HOME=" + filepath.Join(dir, "h"),
		"KUBECONFIG=" + kc, "NSYS_CORTEX_KUBE_IMAGE=devcluster"}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nsys-cortex %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Its pods' network is open: the network probe sees it, and a create
	// is refused until the person says to run neurons open.
	refused := exec.Command(cli, "create", "--mode", "kube", "dev0")
	refused.Env = env
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "NOT enforced") || !strings.Contains(string(out), "kube.allow_open_network") {
		t.Fatalf("a create on devcluster's open network: %v\n%s", err, out)
	}
	if !strings.Contains(banner, "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true") {
		t.Fatalf("the banner does not say how to run neurons on its open network:\n%s", banner)
	}
	env = append(env, "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true")
	run("create", "--mode", "kube", "dev1")
	if out := run("exec", "dev1", "--", "sh", "-c", "echo hello"); out != "hello\n" {
		t.Fatalf("exec: %q", out)
	}
	run("destroy", "--wipe", "dev1")
	if out := run("list"); strings.Contains(out, "dev1") {
		t.Fatalf("list after destroy --wipe:\n%s", out)
	}
	if err := dc.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("devcluster on an interrupt: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("devcluster did not stop within a minute of an interrupt")
	}
	if _, err := os.Stat(kc); !os.IsNotExist(err) {
		t.Fatalf("the kubeconfig outlives devcluster: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "cortex-devcluster-*"))
	if len(left) != 0 {
		t.Fatalf("devcluster left %v", left)
	}
}
