package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func (f *fixture) running(id string) (sandbox.Manager, *link.Client) {
	f.t.Helper()
	m := f.manager()
	f.create(m, id)
	c, err := m.Connect(f.ctx, id)
	if err != nil {
		f.t.Fatalf("connect %s: %v", id, err)
	}
	return m, c
}

func sh(script string) protocol.Command { return protocol.Command{Shell: script} }

func testExec(t *testing.T, f *fixture) {
	_, c := f.running("ex")
	ctx := f.ctx
	run := func(t *testing.T, r *link.ExecRequest) *link.ExecResult {
		t.Helper()
		res, err := c.Exec(ctx, r)
		if err != nil {
			t.Fatalf("exec %+v: %v", r.Command, err)
		}
		return res
	}
	t.Run("ArgvAndExitCode", func(t *testing.T) {
		res := run(t, &link.ExecRequest{Command: protocol.Command{Argv: []string{"sh", "-c", "printf out; printf err >&2; exit 7"}}})
		if res.ExitCode != 7 || string(res.Stdout) != "out" || string(res.Stderr) != "err" || res.Signal != "" {
			t.Fatalf("%+v stdout=%q stderr=%q", res.ExecResult, res.Stdout, res.Stderr)
		}
	})
	t.Run("ShellCwdEnv", func(t *testing.T) {
		run(t, &link.ExecRequest{Command: sh("mkdir -p sub/dir")})
		res := run(t, &link.ExecRequest{Command: protocol.Command{Shell: `echo "$PWD|$GREETING"`, Cwd: "sub/dir", Env: []string{"GREETING=hello world"}}})
		out := strings.TrimSpace(string(res.Stdout))
		if !strings.HasSuffix(out, "/sub/dir|hello world") {
			t.Fatalf("got %q", out)
		}
		if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}, Cwd: "no/such/dir"}}); !protocol.HasCode(err, protocol.CodeNotFound) {
			t.Fatalf("missing cwd: %v, want NOT_FOUND", err)
		}
	})
	t.Run("MissingProgram", func(t *testing.T) {
		res := run(t, &link.ExecRequest{Command: protocol.Command{Argv: []string{"no-such-program-xyz"}}})
		if res.ExitCode != 127 || !strings.Contains(string(res.Stderr), "no-such-program-xyz") {
			t.Fatalf("%+v stderr=%q", res.ExecResult, res.Stderr)
		}
		run(t, &link.ExecRequest{Command: sh("printf '#!/bin/sh\\n' > noexec.sh; chmod 644 noexec.sh")})
		res = run(t, &link.ExecRequest{Command: protocol.Command{Argv: []string{"./noexec.sh"}}})
		if res.ExitCode != 126 {
			t.Fatalf("non-executable: %+v stderr=%q", res.ExecResult, res.Stderr)
		}
	})
	t.Run("Signal", func(t *testing.T) {
		res := run(t, &link.ExecRequest{Command: sh("kill -9 $$")})
		if res.ExitCode != 137 || res.Signal != "SIGKILL" {
			t.Fatalf("%+v", res.ExecResult)
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		start := time.Now()
		res := run(t, &link.ExecRequest{Command: sh("sleep 30"), Timeout: 200 * time.Millisecond})
		if !res.TimedOut || res.Signal != "SIGKILL" || time.Since(start) > 10*time.Second {
			t.Fatalf("%+v after %s", res.ExecResult, time.Since(start))
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		sleeper := uniqueSleep()
		go func() {
			waittest.For(t, 5*time.Second, "the command to start", func() bool { return len(f.processes(c, sleeper)) > 0 })
			cancel()
		}()
		_, err := c.Exec(cctx, &link.ExecRequest{Command: sh("exec " + strings.Join(sleeper, " ")), Timeout: link.NoTimeout})
		if err == nil {
			t.Fatal("cancelled exec returned no error")
		}
		waittest.For(t, 5*time.Second, "the cancelled command to be killed", func() bool { return len(f.processes(c, sleeper)) == 0 })
	})
	t.Run("StdinBodyAndStream", func(t *testing.T) {
		res := run(t, &link.ExecRequest{Command: sh("tr a-z A-Z"), Stdin: strings.NewReader("shout")})
		if string(res.Stdout) != "SHOUT" {
			t.Fatalf("%q", res.Stdout)
		}
		big := make([]byte, 9<<20+123)
		rand.Read(big)
		// An io.Reader that hides its length forces the streamed path.
		res = run(t, &link.ExecRequest{Command: sh("sha256sum | cut -c1-64"), Stdin: struct{ *bytes.Reader }{bytes.NewReader(big)}})
		if got, want := strings.TrimSpace(string(res.Stdout)), sha256hex(big); got != want {
			t.Fatalf("stdin hash %q, want %q (stderr %q)", got, want, res.Stderr)
		}
	})
	t.Run("StreamedOutput", func(t *testing.T) {
		var out, errb bytes.Buffer
		res := run(t, &link.ExecRequest{Command: sh("head -c 7000000 /dev/zero; echo done >&2"), Stdout: &out, Stderr: &errb, Timeout: link.NoTimeout})
		if res.ExitCode != 0 || out.Len() != 7000000 || errb.String() != "done\n" || res.StdoutLen != 7000000 {
			t.Fatalf("%+v out=%d err=%q", res.ExecResult, out.Len(), errb.String())
		}
	})
	t.Run("OutputCap", func(t *testing.T) {
		res := run(t, &link.ExecRequest{Command: sh("head -c 100000 /dev/zero"), MaxOutput: 1000})
		if len(res.Stdout) != 1000 || !res.StdoutTruncated || res.ExitCode != 0 {
			t.Fatalf("%+v len=%d", res.ExecResult, len(res.Stdout))
		}
		if _, err := c.Exec(ctx, &link.ExecRequest{Command: sh("true"), MaxOutput: 1 << 30}); !protocol.HasCode(err, protocol.CodeTooLarge) {
			t.Fatalf("huge maxOutput: %v, want TOO_LARGE", err)
		}
	})
	t.Run("BackgroundedChildDoesNotHang", func(t *testing.T) {
		start := time.Now()
		res := run(t, &link.ExecRequest{Command: sh("sleep 30 & echo started")})
		if strings.TrimSpace(string(res.Stdout)) != "started" || time.Since(start) > 5*time.Second {
			t.Fatalf("%+v %q after %s", res.ExecResult, res.Stdout, time.Since(start))
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := 0; i < 32; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"echo", strings.Repeat("x", i)}}})
				if err == nil && strings.TrimSpace(string(res.Stdout)) != strings.Repeat("x", i) {
					err = &protocol.Error{Code: protocol.CodeInternal, Message: "wrong output " + string(res.Stdout)}
				}
				if err != nil {
					errs <- err
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("BadRequests", func(t *testing.T) {
		for _, cmd := range []protocol.Command{{}, {Argv: []string{"a"}, Shell: "b"}, {Argv: []string{""}}, {Argv: []string{"true"}, Env: []string{"NOEQUALS"}}} {
			if _, err := c.Exec(ctx, &link.ExecRequest{Command: cmd}); !protocol.HasCode(err, protocol.CodeBadRequest) {
				t.Errorf("exec %+v: %v, want BAD_REQUEST", cmd, err)
			}
		}
	})
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
