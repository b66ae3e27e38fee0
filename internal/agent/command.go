//go:build linux

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// notRunnable says why a program could not be started, with the shell's
// exit code for it: 127 not found, 126 found but not executable.
type notRunnable struct {
	code int
	msg  string
}

func (e *notRunnable) Error() string { return e.msg }

// wireError turns a notRunnable into a protocol error for commands that have
// no exit code to report it with.
func (e *notRunnable) wireError() *protocol.Error {
	if e.code == 127 {
		return protocol.Errorf(protocol.CodeNotFound, "%s", e.msg)
	}
	return protocol.Errorf(protocol.CodePermission, "%s", e.msg)
}

// prepare builds the process for c: argv, environment, working directory and
// the resolved program path. It does not start it.
func (a *Agent) prepare(c *protocol.Command) (*exec.Cmd, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	argv := c.Argv
	if c.Shell != "" {
		argv = []string{"/bin/sh", "-c", c.Shell}
	}
	dir := a.fs.workdir
	if c.Cwd != "" {
		p, exists, err := a.fs.resolve(c.Cwd)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, protocol.Errorf(protocol.CodeNotFound, "working directory %s does not exist", p)
		}
		st, _, err := a.fs.stat(p, true)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "working directory %s is not a directory", p)
		}
		dir = p
	}
	base := a.cfg.Env
	if base == nil {
		base = os.Environ()
	}
	if ad := a.adopted.Load(); ad != nil {
		base = protocol.MergeEnv(base, ad.set)
	}
	env := protocol.MergeEnv(base, c.Env)
	env = protocol.MergeEnv(env, []string{"PWD=" + dir})
	path, err := lookPath(argv[0], envValue(env, "PATH"), dir)
	if err != nil {
		return nil, err
	}
	return &exec.Cmd{
		Path: path, Args: argv, Env: env, Dir: dir,
		// Each command leads its own process group so that a signal or a
		// kill reaches everything it started; the kernel kills it if the
		// agent dies.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}, nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds name the way a shell would: a name with a slash is taken as
// it is (relative to dir), anything else is searched in PATH.
func lookPath(name, pathEnv, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, checkExecutable(name, p)
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	var denied error
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		err := checkExecutable(name, p)
		if err == nil {
			return p, nil
		}
		if e, ok := err.(*notRunnable); ok && e.code == 126 && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", &notRunnable{code: 127, msg: fmt.Sprintf("%s: command not found (searched PATH=%s)", name, pathEnv)}
}

func checkExecutable(name, p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return &notRunnable{code: 127, msg: fmt.Sprintf("%s: no such file or directory", name)}
	}
	if st.IsDir() {
		return &notRunnable{code: 126, msg: fmt.Sprintf("%s: is a directory", name)}
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return &notRunnable{code: 126, msg: fmt.Sprintf("%s: permission denied (not executable)", name)}
	}
	return nil
}

// exitStatus returns the shell-style exit code of a finished process and the
// name of the signal that ended it, if any.
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, ""
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}

// parseSignal accepts "TERM", "SIGTERM", "sigterm" or "15".
func parseSignal(s string) (syscall.Signal, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, protocol.Errorf(protocol.CodeBadRequest, "signal is empty")
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
		if n <= 0 || n > 64 {
			return 0, protocol.Errorf(protocol.CodeBadRequest, "signal %d is out of range", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, protocol.Errorf(protocol.CodeBadRequest, "unknown signal %q", s)
}
