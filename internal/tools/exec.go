package tools

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// keptOutput bounds what one command's output may hold in memory; beyond
// it the middle is dropped (the head and tail are what a model reads).
const keptOutput = 16 << 20

// outputDir is where, under the neuron's $TMPDIR, a command's full output
// is saved when the result had to be cut.
const outputDir = "cortex-tool-output"

type bashIn struct {
	Command    string `json:"command" jsonschema:"the shell command line (run by /bin/sh -c in the workdir)"`
	Timeout    int    `json:"timeout,omitempty" jsonschema:"seconds before the command is killed (default 120, at most 600)"`
	Background bool   `json:"background,omitempty" jsonschema:"start it as a background process and return its pid at once (read its output with the process tool)"`
	Cwd        string `json:"cwd,omitempty" jsonschema:"working directory (default: the workdir)"`
}

var bashTool = define("bash", GroupExec, Annotations{Destructive: true},
	"Run a shell command in the neuron and return its output (stdout and stderr interleaved) and exit status. Output over the limit keeps its head and tail; the full output is saved in the neuron and its path given. background=true starts a long-running process (servers, watchers) instead.",
	func(s *jsonschema.Schema) { bounds(s, "timeout", 0, 86400) },
	func(in *bashIn) *subject { return &subject{Command: in.Command, Reads: cwdPaths(in.Cwd), Dir: in.Cwd} },
	func(ctx context.Context, c *call, in *bashIn) (*Result, error) {
		if in.Background {
			return c.startBackground(ctx, in.Command, in.Cwd)
		}
		return c.runShell(ctx, in.Command, in.Cwd, in.Timeout)
	})

func cwdPaths(cwd string) []string {
	if cwd == "" {
		return nil
	}
	return []string{cwd}
}

// timeout picks a command's timeout within the policy's limits.
func (c *call) timeout(seconds int) (time.Duration, error) {
	d := time.Duration(c.res.DefaultTimeout)
	if d <= 0 {
		d = 120 * time.Second
	}
	if seconds > 0 {
		d = time.Duration(seconds) * time.Second
	}
	if max := time.Duration(c.res.MaxTimeout); max > 0 && d > max {
		return 0, &InputError{Tool: c.tool.Name, Field: "timeout", Msg: fmt.Sprintf("is %s, over this policy's maximum of %s", d, max)}
	}
	return d, nil
}

// runShell runs a command to completion and reports it.
func (c *call) runShell(ctx context.Context, command, cwd string, seconds int) (*Result, error) {
	d, err := c.timeout(seconds)
	if err != nil {
		return nil, err
	}
	cl, err := c.channel(ctx)
	if err != nil {
		return nil, err
	}
	out := &headTail{max: keptOutput}
	started := time.Now()
	argv, _ := c.kit.shell(command) // the dialect the policy read it in
	r, err := cl.Exec(ctx, &link.ExecRequest{
		Command: protocol.Command{Argv: argv, Cwd: c.optPath(cwd), Env: c.kit.commandEnv()},
		Stdout:  out, Stderr: out, Timeout: d,
	})
	if err != nil {
		return nil, err
	}
	body := c.kit.redactor.Redact(out.full()) // before any cut: no half secrets
	var b strings.Builder
	limit := c.res.MaxOutputChars
	if limit > 0 && len(body) > limit {
		saved := c.saveOutput(ctx, cl, out)
		body = CapText(body, limit-200)
		switch {
		case saved != "" && out.dropped() > 0:
			body += fmt.Sprintf("\n[output was %d bytes; its first and last %d MiB are in %s: look into it with bash (grep, sed -n, tail)]", out.total, keptOutput>>21, saved)
		case saved != "":
			body += fmt.Sprintf("\n[output was %d bytes; the full output is in %s: look into it with bash (grep, sed -n, tail)]", out.total, saved)
		}
	}
	b.WriteString(body)
	if body != "" && !strings.HasSuffix(body, "\n") {
		b.WriteByte('\n')
	}
	switch {
	case r.TimedOut:
		fmt.Fprintf(&b, "[timed out after %s; the command's processes were killed]", d)
	case r.Signal != "":
		fmt.Fprintf(&b, "[killed by %s]", r.Signal)
	default:
		fmt.Fprintf(&b, "[exit code %d, %s]", r.ExitCode, time.Since(started).Round(time.Millisecond))
	}
	return &Result{Text: b.String(), IsError: r.TimedOut}, nil
}

// optPath is a resolved cwd, or "" for the workdir.
func (c *call) optPath(p string) string {
	if p == "" {
		return ""
	}
	return c.path(p)
}

// saveOutput writes what the command printed to a file in the neuron and
// returns its path ("" when it could not). It is written by a command, not
// the file API: $TMPDIR may lie outside the file API's root (process mode).
func (c *call) saveOutput(ctx context.Context, cl *link.Client, out *headTail) string {
	_, tmp, err := c.kit.dirs(ctx, c)
	if err != nil {
		return ""
	}
	p := fmt.Sprintf("%s/%s/%s-%d.log", tmp, outputDir, c.tool.Name, time.Now().UnixNano())
	r, err := cl.Exec(ctx, &link.ExecRequest{
		Command: protocol.Command{Argv: []string{"/bin/sh", "-c", `umask 077 && mkdir -p "${1%/*}" && cat > "$1"`, "sh", p}, Env: systemEnv},
		Stdin:   strings.NewReader(out.full()),
		Timeout: time.Minute,
	})
	if err != nil || r.ExitCode != 0 {
		return ""
	}
	return p
}

// startBackground starts a background process.
func (c *call) startBackground(ctx context.Context, command, cwd string) (*Result, error) {
	cl, err := c.channel(ctx)
	if err != nil {
		return nil, err
	}
	argv, _ := c.kit.shell(command)
	info, err := cl.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: argv, Cwd: c.optPath(cwd), Env: c.kit.commandEnv()}, Stdin: true})
	if err != nil {
		return nil, err
	}
	return textf("started pid %d in the background; read its output with process action=output pid=%d (offset to continue), stop it with action=kill", info.PID, info.PID), nil
}

// headTail keeps what a command writes, up to max bytes: the head, and
// the tail in a ring, with the count of what was dropped between. Writes
// from stdout and stderr interleave in arrival order.
type headTail struct {
	mu    sync.Mutex
	max   int
	head  []byte
	ring  []byte // the last max/2 bytes once head is full
	at    int    // where the ring's next byte goes
	total int64
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(len(p))
	n := len(p)
	if room := h.max/2 - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	size := h.max / 2
	if len(p) >= size { // only the last size bytes of p can survive
		p = p[len(p)-size:]
	}
	for len(p) > 0 {
		if len(h.ring) < size {
			k := min(size-len(h.ring), len(p))
			h.ring = append(h.ring, p[:k]...)
			p = p[k:]
			h.at = len(h.ring) % size
			continue
		}
		k := copy(h.ring[h.at:], p)
		p = p[k:]
		h.at = (h.at + k) % size
	}
	return n, nil
}

// tail returns the ring in order.
func (h *headTail) tail() []byte {
	if len(h.ring) < h.max/2 {
		return h.ring
	}
	return append(append([]byte(nil), h.ring[h.at:]...), h.ring[:h.at]...)
}

// dropped is how many bytes were not kept.
func (h *headTail) dropped() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total - int64(len(h.head)+len(h.ring))
}

// full is everything kept, with a note where the middle was dropped.
func (h *headTail) full() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := h.total - int64(len(h.head)+len(h.ring))
	if dropped <= 0 {
		return string(h.head) + string(h.tail())
	}
	return fmt.Sprintf("%s\n[… %d bytes dropped …]\n%s", h.head, dropped, h.tail())
}

type processIn struct {
	Action       string `json:"action" jsonschema:"list, output, input, signal or kill"`
	PID          int    `json:"pid,omitempty" jsonschema:"the process (all actions but list)"`
	Offset       int64  `json:"offset,omitempty" jsonschema:"output: stdout bytes already read (the next_offset of the previous call)"`
	StderrOffset int64  `json:"stderr_offset,omitempty" jsonschema:"output: stderr bytes already read"`
	Data         string `json:"data,omitempty" jsonschema:"input: text to write to the process's stdin"`
	EOF          bool   `json:"eof,omitempty" jsonschema:"input: close stdin after data"`
	Signal       string `json:"signal,omitempty" jsonschema:"signal: TERM, INT, HUP, KILL, USR1, ..."`
}

var processTool = define("process", GroupExec, Annotations{Destructive: true},
	"Manage background processes of the neuron: list them; read a process's output since an offset (returns next offsets and whether it still runs); write to its stdin; send it a signal; kill it (TERM, then KILL).",
	func(s *jsonschema.Schema) { enum(s, "action", "list", "output", "input", "signal", "kill") },
	func(in *processIn) *subject {
		if in.Action == "input" {
			// What is typed into a process is judged as a command line:
			// the process may be a shell, in a directory it chose.
			return &subject{Action: in.Action, Command: in.Data, DirUnknown: true}
		}
		return &subject{Action: in.Action}
	},
	func(ctx context.Context, c *call, in *processIn) (*Result, error) {
		cl, err := c.channel(ctx)
		if err != nil {
			return nil, err
		}
		if in.Action != "list" && in.PID <= 0 {
			return nil, &InputError{Tool: "process", Field: "pid", Msg: "is required for action " + in.Action}
		}
		switch in.Action {
		case "list":
			ps, err := cl.ProcList(ctx)
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			for _, p := range ps {
				if p.Pty {
					continue // terminals belong to people, not to this tool
				}
				state := "running"
				if !p.Running {
					state = fmt.Sprintf("exited %d", p.ExitCode)
					if p.Signal != "" {
						state = "killed by " + p.Signal
					}
				}
				fmt.Fprintf(&b, "pid %d  %s  stdout %d B  stderr %d B  %s\n", p.PID, state, p.StdoutEnd, p.StderrEnd, strings.Join(p.Argv, " "))
			}
			if b.Len() == 0 {
				return text("no background processes"), nil
			}
			return text(strings.TrimSuffix(b.String(), "\n")), nil
		case "output":
			return c.procOutput(ctx, cl, in)
		case "input":
			if err := cl.ProcInput(ctx, in.PID, []byte(in.Data), in.EOF); err != nil {
				return nil, err
			}
			return textf("wrote %d bytes to pid %d%s", len(in.Data), in.PID, map[bool]string{true: " and closed its stdin"}[in.EOF]), nil
		case "signal":
			if in.Signal == "" {
				return nil, &InputError{Tool: "process", Field: "signal", Msg: "is required for action signal"}
			}
			if err := cl.ProcSignal(ctx, in.PID, in.Signal); err != nil {
				return nil, err
			}
			return textf("sent %s to pid %d", in.Signal, in.PID), nil
		default: // kill
			if err := cl.ProcSignal(ctx, in.PID, "TERM"); err != nil {
				return nil, err
			}
			for range 20 {
				ps, err := cl.ProcList(ctx)
				if err != nil {
					return nil, err
				}
				if !running(ps, in.PID) {
					return textf("pid %d stopped", in.PID), nil
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
			if err := cl.ProcSignal(ctx, in.PID, "KILL"); err != nil {
				return nil, err
			}
			return textf("pid %d did not stop on TERM within 2 s: killed", in.PID), nil
		}
	})

// procOutput returns a background process's output from the offsets
// given, at most the policy's output cap of it, with the offsets to go on
// from: nothing is skipped, however long the output.
func (c *call) procOutput(ctx context.Context, cl *link.Client, in *processIn) (*Result, error) {
	limit := int64(c.res.MaxOutputChars)
	if limit <= 0 {
		limit = 30000
	}
	limit -= 300 // room for the notes
	var stdout, stderr []byte
	next := map[string]int64{protocol.StreamStdout: in.Offset, protocol.StreamStderr: in.StderrOffset}
	var gaps []string
	info, err := cl.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: in.PID, StdoutOffset: in.Offset, StderrOffset: in.StderrOffset},
		func(stream string, off int64, data []byte) error {
			room := limit - int64(len(stdout)+len(stderr))
			if room <= 0 {
				return nil // the page is full: the rest is the next call's, from next
			}
			if off > next[stream] {
				gaps = append(gaps, fmt.Sprintf("%s bytes %d-%d were lost (the replay buffer keeps the last 1 MiB)", stream, next[stream], off))
				next[stream] = off
			}
			if off < next[stream] { // already delivered
				skip := min(next[stream]-off, int64(len(data)))
				data, off = data[skip:], off+skip
			}
			if int64(len(data)) > room {
				data = data[:room]
			}
			if stream == protocol.StreamStderr {
				stderr = append(stderr, data...)
			} else {
				stdout = append(stdout, data...)
			}
			next[stream] = off + int64(len(data))
			return nil
		})
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.Write(stdout)
	if len(stderr) > 0 {
		fmt.Fprintf(&b, "\n[stderr]\n%s", stderr)
	}
	for _, g := range gaps {
		fmt.Fprintf(&b, "\n[%s]", g)
	}
	state := "still running"
	if !info.Running {
		state = fmt.Sprintf("exited with code %d", info.ExitCode)
		if info.Signal != "" {
			state = "killed by " + info.Signal
		}
	}
	more := ""
	if next[protocol.StreamStdout] < info.StdoutEnd || next[protocol.StreamStderr] < info.StderrEnd {
		more = "; more output waits: call again with these offsets"
	}
	fmt.Fprintf(&b, "\n[pid %d %s; next offset=%d stderr_offset=%d%s]", in.PID, state, next[protocol.StreamStdout], next[protocol.StreamStderr], more)
	out := b.String()
	if len(stdout) == 0 {
		// Only the notes: they start on the first line. A page's own
		// output keeps its first byte, a newline too (a page that starts
		// at a line's end would glue two lines).
		out = strings.TrimPrefix(out, "\n")
	}
	return text(out), nil
}

func running(ps []protocol.ProcInfo, pid int) bool {
	for _, p := range ps {
		if p.PID == pid {
			return p.Running
		}
	}
	return false
}

type elevatedIn struct {
	Command string `json:"command" jsonschema:"the shell command line"`
	Reason  string `json:"reason" jsonschema:"why this needs to run outside the normal command rules (recorded in the audit log)"`
	Timeout int    `json:"timeout,omitempty" jsonschema:"seconds (default 120, at most the policy's maximum)"`
}

var elevatedTool = define("elevated", GroupElevated, Annotations{Destructive: true},
	"Run a shell command outside the normal command rules, only where the policy grants elevation. Give the reason: it is recorded in the audit log with the command. It runs as the neuron's user, like bash; timeouts and output limits still apply.",
	func(s *jsonschema.Schema) {
		bounds(s, "timeout", 0, 86400)
		prop(s, "reason").Pattern = `\S` // not blank: checked before the policy is asked
	},
	func(in *elevatedIn) *subject { return &subject{Command: in.Command, Elevated: true, Reason: in.Reason} },
	func(ctx context.Context, c *call, in *elevatedIn) (*Result, error) {
		if c.kit.audit != nil {
			if err := c.kit.audit.Record("tool.elevated", map[string]any{
				"neuron": c.kit.neuron.ID(), "command": c.kit.redactor.Redact(in.Command), "reason": c.kit.redactor.Redact(in.Reason),
			}); err != nil {
				return nil, fmt.Errorf("elevated: the audit log cannot be written, so nothing runs: %w", err)
			}
		}
		return c.runShell(ctx, in.Command, "", in.Timeout)
	})
