package ctxfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

var errEOF = io.EOF

// screenBytes is how much of a terminal's recent output screen renders.
const screenBytes = 64 << 10

// write carries out a write to r: verbs into a ctl, keys into input.
// Every write is an audit fact; a bad verb is ErrInvalid and its reason is
// what the ctl file reads next.
func (t *Tree) write(ctx context.Context, c Caller, r *ref, data []byte) error {
	if !r.kind.writable() {
		return ErrPermission
	}
	if t.o.ReadOnly || (!t.operator(c) && !t.neuronWrites.Load()) {
		return ErrReadOnly
	}
	if t.o.Controller == nil {
		return ErrReadOnly
	}
	if r.kind == kTInput {
		cmd := &Command{Neuron: r.neuron.ID, Target: TargetTerminal, PID: r.proc.PID, Verb: "input", Data: data, UID: c.UID}
		err := t.authorize(ctx, c, cmd)
		if err == nil {
			err = t.o.Controller.Control(ctx, cmd)
		}
		t.audit(r, cmd, "", err)
		return err
	}
	text := strings.TrimSpace(string(data))
	if text == "" {
		return nil // a bare newline (echo > ctl) asks nothing
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		cmd, err := t.parse(r, line)
		if err == nil {
			cmd.UID = c.UID
			err = t.authorize(ctx, c, cmd)
		}
		if err == nil {
			err = t.o.Controller.Control(ctx, cmd)
		}
		t.audit(r, cmd, line, err)
		if err != nil {
			t.setLast(r.path, fmt.Sprintf("error %q: %v", line, err))
			return err
		}
		t.setLast(r.path, fmt.Sprintf("ok %q", line))
	}
	return nil
}

// authorize asks the gate about cmd; without one, only the operator's
// commands pass.
func (t *Tree) authorize(ctx context.Context, c Caller, cmd *Command) error {
	op := t.operator(c)
	if t.o.Gate == nil {
		if op {
			return nil
		}
		return fmt.Errorf("%w: no gate authorizes a neuron's own requests on this mount", ErrDenied)
	}
	if err := t.o.Gate.Authorize(ctx, op, cmd); err != nil {
		return fmt.Errorf("%w: %v", ErrDenied, err)
	}
	return nil
}

// parse checks one ctl line.
func (t *Tree) parse(r *ref, line string) (*Command, error) {
	f := strings.Fields(line)
	verb, args := f[0], f[1:]
	cmd := &Command{Neuron: r.neuron.ID, Verb: verb}
	want := func(n int, usage string) error {
		if len(args) != n {
			return invalidf("%s: usage: %s", verb, usage)
		}
		return nil
	}
	switch r.kind {
	case kNCtl:
		cmd.Target = TargetNeuron
		switch verb {
		case "stop", "restart", "pause", "resume":
			return cmd, want(0, verb)
		case "snapshot":
			if err := want(1, "snapshot NAME"); err != nil {
				return cmd, err
			}
			cmd.Arg = args[0]
			return cmd, nil
		case "kill":
			if err := want(1, "kill SIG"); err != nil {
				return cmd, err
			}
			cmd.Arg, _ = checkSignal(args[0])
			return cmd, signalError(args[0])
		}
		return cmd, invalidf("unknown verb %q for a neuron: use stop, restart, snapshot NAME, kill SIG, pause or resume", verb)
	case kPCtl:
		cmd.Target, cmd.PID = TargetProcess, r.proc.PID
		if verb == "signal" || verb == "kill" {
			if err := want(1, "signal SIG"); err != nil {
				return cmd, err
			}
			cmd.Verb = "signal"
			cmd.Arg, _ = checkSignal(args[0])
			return cmd, signalError(args[0])
		}
		return cmd, invalidf("unknown verb %q for a process: use signal SIG", verb)
	case kTCtl:
		cmd.Target, cmd.PID = TargetTerminal, r.proc.PID
		switch verb {
		case "close":
			return cmd, want(0, "close")
		case "resize":
			if err := want(1, "resize COLSxROWS"); err != nil {
				return cmd, err
			}
			m := sizeRE.FindStringSubmatch(args[0])
			if m == nil {
				return cmd, invalidf("resize: give COLSxROWS, e.g. 120x40, not %q", args[0])
			}
			cmd.Cols, _ = strconv.Atoi(m[1])
			cmd.Rows, _ = strconv.Atoi(m[2])
			if cmd.Cols < 1 || cmd.Rows < 1 || cmd.Cols > 1000 || cmd.Rows > 1000 {
				return cmd, invalidf("resize: give a size from 1x1 to 1000x1000")
			}
			return cmd, nil
		}
		return cmd, invalidf("unknown verb %q for a terminal: use resize COLSxROWS or close", verb)
	}
	return cmd, ErrPermission
}

var sizeRE = regexp.MustCompile(`^(\d{1,4})x(\d{1,4})$`)

var signalNames = map[string]bool{"HUP": true, "INT": true, "QUIT": true, "KILL": true, "USR1": true, "USR2": true,
	"TERM": true, "STOP": true, "CONT": true, "WINCH": true, "ALRM": true, "PIPE": true, "TSTP": true}

// checkSignal normalizes a signal name (TERM, SIGTERM, 15).
func checkSignal(s string) (string, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return s, n > 0 && n <= 64
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	return name, signalNames[name]
}

func signalError(s string) error {
	if _, ok := checkSignal(s); !ok {
		return invalidf("unknown signal %q: use TERM, KILL, INT, HUP, ... or a number", s)
	}
	return nil
}

// audit records a write as a fact.
func (t *Tree) audit(r *ref, c *Command, line string, err error) {
	if t.o.Auditor == nil {
		return
	}
	fields := map[string]any{"path": "/" + r.path, "uid": c.UID, "neuron": c.Neuron, "verb": c.Verb, "ok": err == nil}
	if c.Verb == "input" {
		fields["bytes"] = len(c.Data) // keys may be secrets: never recorded
	} else {
		fields["line"] = line
	}
	if err != nil {
		fields["error"] = err.Error()
	}
	_ = t.o.Auditor.Record("ctx.ctl", fields) // best effort: the write's own result is what the writer sees
}

// errnos is /ctx's one table: the errno FUSE answers for each class. EIO
// stands where no errno says more; the ctl file's last line says why.
var errnos = map[errdefs.Class]syscall.Errno{
	errdefs.Internal:            syscall.EIO,
	errdefs.NotFound:            syscall.ENOENT,
	errdefs.NotRunning:          syscall.EHOSTDOWN,
	errdefs.OwnedElsewhere:      syscall.EACCES,
	errdefs.Busy:                syscall.EBUSY,
	errdefs.Locked:              syscall.EBUSY,
	errdefs.Exists:              syscall.EEXIST,
	errdefs.Invalid:             syscall.EINVAL,
	errdefs.RangeNotSatisfiable: syscall.EINVAL,
	errdefs.Unenforceable:       syscall.EIO,
	errdefs.Unsupported:         syscall.ENOTSUP,
	errdefs.TooLarge:            syscall.EFBIG,
	errdefs.Timeout:             syscall.ETIMEDOUT,
	errdefs.Permission:          syscall.EACCES,
	errdefs.PathEscape:          syscall.EACCES,
	errdefs.PolicyDenied:        syscall.EPERM,
	errdefs.Unauthorized:        syscall.EACCES,
	errdefs.Unavailable:         syscall.EIO,
	errdefs.Capacity:            syscall.EIO,
	errdefs.RateLimited:         syscall.EAGAIN,
	errdefs.BootFailed:          syscall.EIO,
	errdefs.Cancelled:           syscall.EINTR,
}

// Errno maps an error of the tree or its sources to what FUSE returns: an
// errno in its chain as it is, otherwise its class's.
func Errno(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &en):
		return en
	}
	if en, ok := errnos[errdefs.Of(err)]; ok {
		return en
	}
	return syscall.EIO
}

// shellQuote renders argv as one line a shell reads back as the same words.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// procStatus is a process's status line: "running pid=N started=T" or
// "exited code=N ..." or "killed signal=S ...".
func procStatus(p *protocol.ProcInfo) string {
	started := p.Started.UTC().Format(time.RFC3339)
	switch {
	case p.Running:
		return fmt.Sprintf("running pid=%d started=%s\n", p.PID, started)
	case p.Signal != "":
		return fmt.Sprintf("killed pid=%d signal=%s started=%s ended=%s\n", p.PID, strings.TrimPrefix(p.Signal, "SIG"), started, p.Ended.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("exited pid=%d code=%d started=%s ended=%s\n", p.PID, p.ExitCode, started, p.Ended.UTC().Format(time.RFC3339))
}

// exitText is empty while the process runs, then its exit code, or
// "signal NAME".
func exitText(p *protocol.ProcInfo) string {
	switch {
	case p.Running:
		return ""
	case p.Signal != "":
		return "signal " + strings.TrimPrefix(p.Signal, "SIG") + "\n"
	}
	return strconv.Itoa(p.ExitCode) + "\n"
}

func jsonLine(v any) []byte {
	b, _ := json.MarshalIndent(v, "", "  ") // plain data
	return append(b, '\n')
}

var ansiRE = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])`)

// renderScreen approximates a terminal's screen from its recent output:
// escape sequences removed, carriage returns honoured per line, the last
// rows lines kept. (A full terminal emulator is not worth its weight for
// a glance from the shell; replay has the exact bytes.)
func renderScreen(b []byte, rows int) []byte {
	if rows <= 0 {
		rows = 24
	}
	s := ansiRE.ReplaceAllString(string(b), "")
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			l = l[j+1:]
		}
		lines[i] = strings.Map(func(r rune) rune {
			if r < ' ' && r != '\t' {
				return -1
			}
			return r
		}, l)
	}
	if len(lines) > rows {
		lines = lines[len(lines)-rows:]
	}
	out := strings.Join(lines, "\n")
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return []byte(out)
}
