// Package image builds the neuron image without a registry: a root
// filesystem directory — Debian from debootstrap, or busybox for tests —
// with cortex-agent and the user "agent" in it, imported into the local
// Docker daemon. The same directory is an nsbox base (`create --mode nsbox
// --image DIR`) and, with Options.VM, the root disk of the microVM image
// (internal/vmimage: kernel, initramfs, root disk).
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// Defaults.
const (
	DefaultTag    = "nsys-cortex-neuron:latest"
	TestTag       = "nsys-cortex-neuron:test"
	DefaultSuite  = "bookworm"
	DefaultMirror = "http://deb.debian.org/debian"
	// AgentLabel carries the sha256 of the agent an image was built with.
	AgentLabel = "nsys-cortex.agent"
)

// Packages are what the full image holds besides Debian's minimal base.
var Packages = []string{"bash", "coreutils", "python3", "python3-pip", "python3-venv", "git", "nodejs", "npm", "ca-certificates", "curl", "procps", "less"}

// Options say what to build.
type Options struct {
	// RootFS is the directory to build the root filesystem in.
	RootFS string
	// Agent is the cortex-agent binary to put in it.
	Agent string
	// Test builds the small busybox image the test suites run.
	Test bool
	// Suite and Mirror are debootstrap's (full image only).
	Suite, Mirror string
	// Rebuild starts from scratch even if RootFS holds a finished build.
	Rebuild bool
	// Tag, when set, imports the result into docker under this name.
	Tag string
	// VM, when set, is where the microVM image is built from the root
	// filesystem: the kernel (Kernel and Modules, or the newest installed
	// one), the initramfs and the root disk.
	VM              string
	Kernel, Modules string
	// Log receives progress and the tools' output.
	Log io.Writer
}

// Build makes the root filesystem and, with a Tag, the docker image.
func Build(ctx context.Context, o Options) error {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.RootFS == "" || o.Agent == "" {
		return errors.New("image: a root filesystem directory and an agent are needed")
	}
	if o.Suite == "" {
		o.Suite = DefaultSuite
	}
	if o.Mirror == "" {
		o.Mirror = DefaultMirror
	}
	if o.Rebuild {
		if err := os.RemoveAll(o.RootFS); err != nil {
			return err
		}
	}
	var err error
	if o.Test {
		err = busyboxRoot(o.RootFS)
	} else {
		err = debianRoot(ctx, o)
	}
	if err != nil {
		return err
	}
	sum, err := installAgent(o.RootFS, o.Agent)
	if err != nil {
		return err
	}
	if err := addAgentUser(o.RootFS); err != nil {
		return err
	}
	// The root directory itself (a temporary directory is 0700).
	if err := os.Chmod(o.RootFS, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "root filesystem ready: %s\n", o.RootFS)
	if o.VM != "" {
		fmt.Fprintf(o.Log, "VM image in %s:\n", o.VM)
		if _, err := vmimage.Build(ctx, vmimage.BuildOptions{Dir: o.VM, KernelImage: o.Kernel, ModulesDir: o.Modules,
			Agent: o.Agent, RootFS: o.RootFS, Log: o.Log}); err != nil {
			return fmt.Errorf("image: the VM image: %w", err)
		}
		fmt.Fprintf(o.Log, "VM image ready: %s\n", o.VM)
	}
	if o.Tag == "" {
		return nil
	}
	return Import(ctx, o.RootFS, o.Tag, sum, o.Log)
}

// debianRoot runs debootstrap into o.RootFS unless a finished build is there.
func debianRoot(ctx context.Context, o Options) error {
	marker := filepath.Join(o.RootFS, "etc", "nsys-cortex-rootfs")
	want := o.Suite + " " + strings.Join(Packages, ",")
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == want {
		fmt.Fprintf(o.Log, "reusing the Debian root filesystem in %s (--rebuild starts again)\n", o.RootFS)
		return nil
	}
	if os.Getuid() != 0 {
		return errors.New("image: debootstrap needs root (run the build as root, or use --test for the busybox image)")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("image: debootstrap is not installed (apt-get install debootstrap)")
	}
	if err := os.RemoveAll(o.RootFS); err != nil {
		return err
	}
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
		fmt.Fprintf(o.Log, "$ %s\n", strings.Join(cmd.Args, " "))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("image: %s: %w (its output is above)", name, err)
		}
		return nil
	}
	// debootstrap resolves dependencies too simply for node's and npm's
	// many: it lays down the minimal base, and apt installs the rest.
	if err := run("debootstrap", "--variant=minbase", o.Suite, o.RootFS, o.Mirror); err != nil {
		return err
	}
	proc := filepath.Join(o.RootFS, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("image: mounting /proc in the root filesystem: %w", err)
	}
	defer syscall.Unmount(proc, syscall.MNT_DETACH)
	if err := run("chroot", o.RootFS, "apt-get", "update"); err != nil {
		return err
	}
	if err := run("chroot", append([]string{o.RootFS, "apt-get", "install", "--yes", "--no-install-recommends"}, Packages...)...); err != nil {
		return err
	}
	if err := run("chroot", o.RootFS, "apt-get", "clean"); err != nil {
		return err
	}
	// What a container does not need: package caches and lists.
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"} {
		matches, _ := filepath.Glob(filepath.Join(o.RootFS, g))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	return os.WriteFile(marker, []byte(want+"\n"), 0o644)
}

// busyboxRoot lays out a minimal root: busybox and its applets.
func busyboxRoot(root string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return errors.New("image: the test image needs a static busybox (apt-get install busybox-static)")
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("image: busybox --list: %w", err)
	}
	for _, d := range []string{"bin", "etc", "tmp", "run", "home", "usr/local/bin", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	if err := copyFile(bb, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		link := filepath.Join(root, "bin", applet)
		os.Remove(link)
		if err := os.Symlink("busybox", link); err != nil {
			return err
		}
	}
	return nil
}

// installAgent copies the agent to /usr/local/bin and returns its sha256.
func installAgent(root, agent string) (string, error) {
	if err := os.MkdirAll(filepath.Join(root, "usr", "local", "bin"), 0o755); err != nil {
		return "", err
	}
	if err := copyFile(agent, filepath.Join(root, "usr", "local", "bin", "cortex-agent"), 0o755); err != nil {
		return "", fmt.Errorf("image: installing the agent: %w", err)
	}
	return AgentSum(agent)
}

// addAgentUser adds the user and group "agent" (1000) and its home.
func addAgentUser(root string) error {
	add := func(file, line, prefix string) error {
		p := filepath.Join(root, "etc", file)
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if file == "passwd" && len(b) == 0 {
			b = []byte("root:x:0:0:root:/root:/bin/sh\n")
		}
		if file == "group" && len(b) == 0 {
			b = []byte("root:x:0:\n")
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				return os.WriteFile(p, b, 0o644)
			}
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		return os.WriteFile(p, append(b, line+"\n"...), 0o644)
	}
	shell := "/bin/sh"
	if _, err := os.Stat(filepath.Join(root, "bin", "bash")); err == nil {
		shell = "/bin/bash"
	}
	if err := add("passwd", "agent:x:1000:1000:agent:/home/agent:"+shell, "agent:"); err != nil {
		return err
	}
	if err := add("group", "agent:x:1000:", "agent:"); err != nil {
		return err
	}
	for _, d := range []string{"home/agent/workspace", "run/nsys-cortex"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if os.Getuid() == 0 {
		for _, d := range []string{"home/agent", "home/agent/workspace"} {
			os.Lchown(filepath.Join(root, d), 1000, 1000)
		}
	}
	return nil
}

// Import makes a docker image of root: user agent, the workspace as the
// working directory, and the agent's sha256 in a label.
func Import(ctx context.Context, root, tag, agentSum string, log io.Writer) error {
	docker := os.Getenv("NSYS_CORTEX_DOCKER_CLI")
	if docker == "" {
		docker = "docker"
	}
	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", root, "-cf", "-", ".")
	imp := exec.CommandContext(ctx, docker, "import",
		"--change", "USER 1000:1000",
		"--change", "WORKDIR /home/agent/workspace",
		"--change", "ENV HOME=/home/agent PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
		"--change", "LABEL "+AgentLabel+"="+agentSum,
		"--change", `CMD ["cortex-agent", "--version"]`,
		"-", tag)
	oldID, _ := exec.CommandContext(ctx, docker, "image", "inspect", "--format", "{{.Id}}", tag).Output()
	// tar writes into docker import through a pipe of which this process
	// keeps no end: a docker that exits early (no daemon) gives tar EPIPE
	// rather than leaving it blocked on a reader that never reads.
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	imp.Stdin, tarCmd.Stdout = r, w
	var tarErr strings.Builder
	tarCmd.Stderr = &tarErr
	imp.Stdout, imp.Stderr = log, log
	err = imp.Start()
	r.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("image: %s import: %w", docker, err)
	}
	err = tarCmd.Run()
	w.Close()
	if err != nil {
		imp.Process.Kill() // a truncated tar must not become an image
		impErr := imp.Wait()
		return fmt.Errorf("image: tar of %s: %v %s (docker import: %v)", root, err, tarErr.String(), impErr)
	}
	if err := imp.Wait(); err != nil {
		return fmt.Errorf("image: docker import: %w (its output is above)", err)
	}
	fmt.Fprintf(log, "imported %s\n", tag)
	// The image the tag named before is left without a name: remove it
	// unless a container still uses it.
	if id := strings.TrimSpace(string(oldID)); id != "" {
		exec.CommandContext(ctx, docker, "image", "rm", id).Run() // in use: it stays until its container goes
	}
	return nil
}

// Current reports whether docker has image tag built with the agent whose
// sha256 is agentSum.
func Current(ctx context.Context, tag, agentSum string) bool {
	docker := os.Getenv("NSYS_CORTEX_DOCKER_CLI")
	if docker == "" {
		docker = "docker"
	}
	out, err := exec.CommandContext(ctx, docker, "image", "inspect", "--format", `{{index .Config.Labels "`+AgentLabel+`"}}`, tag).Output()
	return err == nil && strings.TrimSpace(string(out)) == agentSum
}

// AgentSum returns the sha256 of the agent binary at path.
func AgentSum(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return err
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
