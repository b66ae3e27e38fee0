package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"path"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/tools/memory"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
)

// Neuron is the neuron a kit acts on.
type Neuron interface {
	// ID names the neuron.
	ID() string
	// Client returns the channel to the running neuron.
	Client(ctx context.Context) (*link.Client, error)
	// State returns the neuron's record.
	State(ctx context.Context) (*sandbox.State, error)
}

// Restarter is a Neuron that can be restarted: stopped, then started with
// the same policy; its overlay, and so every change, is kept.
type Restarter interface {
	Restart(ctx context.Context) error
}

// Auditor records facts in the audit log.
type Auditor interface {
	Record(event string, fields map[string]any) error
}

// Approver is asked about calls the policy marks "ask". Without one, ask
// is a denial that says approval was needed.
type Approver func(ctx context.Context, t *Tool, input json.RawMessage, d policy.Decision) (bool, error)

// Kit is the tool kit bound to one neuron and one policy. It is safe for
// concurrent calls.
type Kit struct {
	neuron   Neuron
	policy   *policy.Policy
	audit    Auditor
	approve  Approver
	redactor *redact.Redactor
	memory   func() (*memory.Store, error)
	agent    string

	mu        sync.Mutex
	tools     map[string]*Tool
	order     []string
	reads     map[string]uint64 // resolved path -> hash of the content last read
	seed      maphash.Seed
	home      string // the neuron user's $HOME, once asked
	workdir   string // the neuron's workdir, once asked
	tmp       string // its $TMPDIR
	bash      string // where bash is in the neuron ("": none)
	locks     map[string]*sync.Mutex
	files     map[string]cachedFile // contents last read or written (see keep)
	fileBytes int
}

// Option configures a Kit.
type Option func(*Kit)

// WithPolicy sets the policy (default: the standard preset).
func WithPolicy(p *policy.Policy) Option { return func(k *Kit) { k.policy = p } }

// WithAudit records every decision and elevated run in a.
func WithAudit(a Auditor) Option { return func(k *Kit) { k.audit = a } }

// WithApprover answers "ask" decisions.
func WithApprover(f Approver) Option { return func(k *Kit) { k.approve = f } }

// WithRedactor masks secrets in every result (default: known credential
// patterns only).
func WithRedactor(r *redact.Redactor) Option { return func(k *Kit) { k.redactor = r } }

// WithMemory gives the memory tools their store, opened on first use.
func WithMemory(open func() (*memory.Store, error)) Option {
	return func(k *Kit) { k.memory = sync.OnceValues(open) }
}

// WithAgent names the agent the kit serves (audit facts carry it).
func WithAgent(name string) Option { return func(k *Kit) { k.agent = name } }

type approverKey struct{}

// ContextWithApprover returns ctx carrying an approver for this call's
// "ask" decisions (an MCP client that can ask its user); it takes
// precedence over the kit's own.
func ContextWithApprover(ctx context.Context, f Approver) context.Context {
	return context.WithValue(ctx, approverKey{}, f)
}

// New returns the kit of built-in tools acting on n.
func New(n Neuron, opts ...Option) (*Kit, error) {
	k := &Kit{neuron: n, tools: map[string]*Tool{}, reads: map[string]uint64{}, locks: map[string]*sync.Mutex{}, files: map[string]cachedFile{}, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(k)
	}
	if k.policy == nil {
		p, err := policy.Preset("standard")
		if err != nil {
			return nil, err
		}
		k.policy = p
	}
	if k.redactor == nil {
		k.redactor = redact.New()
	}
	for _, t := range builtins() {
		if err := k.Add(t); err != nil {
			return nil, err
		}
	}
	// What the neuron asks of the host itself (its /ctx writes) is governed
	// by the policy of the kit that drives it.
	if sn, ok := n.(*SetNeuron); ok {
		if err := gate.RecordPolicy(sn.lay, sn.id, k.policy); err != nil {
			return nil, fmt.Errorf("recording the policy of neuron %s: %w", sn.id, err)
		}
	}
	return k, nil
}

// Policy returns the kit's policy.
func (k *Kit) Policy() *policy.Policy { return k.policy }

// Add registers a tool (an attached MCP server's, for instance).
func (k *Kit) Add(t *Tool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, dup := k.tools[t.Name]; dup {
		return fmt.Errorf("tools: %q is registered twice", t.Name)
	}
	k.tools[t.Name] = t
	k.order = append(k.order, t.Name)
	return nil
}

// Tools returns the tools the policy does not deny outright, in
// registration order: a client is never offered a tool it can never use.
func (k *Kit) Tools() []*Tool {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*Tool
	for _, name := range k.order {
		if t := k.tools[name]; k.offered(t) {
			out = append(out, t)
		}
	}
	return out
}

// offered reports whether some call of t could be allowed or asked for:
// its tool or group access is not deny, or one of its actions is granted
// ("neuron.status" while the neuron group is denied).
func (k *Kit) offered(t *Tool) bool {
	if k.policy.Check(&policy.Request{Tool: t.Name, Group: string(t.Group)}).Effect != policy.Deny {
		return true
	}
	for key, e := range k.policy.Tools {
		if strings.HasPrefix(key, t.Name+".") && e != policy.Deny {
			return true
		}
	}
	return false
}

// All returns every registered tool, whatever the policy says.
func (k *Kit) All() []*Tool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Tool, 0, len(k.order))
	for _, name := range k.order {
		out = append(out, k.tools[name])
	}
	return out
}

// Lookup returns the named tool.
func (k *Kit) Lookup(name string) (*Tool, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.tools[name]
	return t, ok
}

// call is one tool call in progress.
type call struct {
	kit    *Kit
	tool   *Tool
	res    policy.Resources
	paths  map[string]string // as given -> resolved in the neuron
	client *link.Client
	reason string // an elevated call's justification
}

// Client returns the neuron's channel.
func (c *call) channel(ctx context.Context) (*link.Client, error) {
	if c.client == nil {
		cl, err := c.kit.neuron.Client(ctx)
		if err != nil {
			return nil, err
		}
		c.client = cl
	}
	return c.client, nil
}

// path returns p as the policy judged it: absolute and symlink-resolved.
func (c *call) path(p string) string {
	if r, ok := c.paths[p]; ok {
		return r
	}
	return p
}

// Plan is what the policy makes of one call, without running it.
type Plan struct {
	Tool        *Tool
	Request     policy.Request
	Explanation policy.Explanation
}

// Explain decides a call as Call would, without running it.
func (k *Kit) Explain(ctx context.Context, name string, input json.RawMessage) (*Plan, error) {
	c, _, req, err := k.prepare(ctx, name, input)
	if err != nil {
		return nil, err
	}
	return &Plan{Tool: c.tool, Request: *req, Explanation: k.policy.Explain(req)}, nil
}

// prepare validates the input and builds the policy request.
func (k *Kit) prepare(ctx context.Context, name string, input json.RawMessage) (*call, any, *policy.Request, error) {
	t, ok := k.Lookup(name)
	if !ok {
		names := make([]string, 0)
		for _, t := range k.Tools() {
			names = append(names, t.Name)
		}
		return nil, nil, nil, &InputError{Tool: name, Msg: "no such tool; tools: " + strings.Join(names, ", ")}
	}
	data, err := coerce(t, input)
	if err != nil {
		return nil, nil, nil, err
	}
	in, err := t.decode(data)
	if err != nil {
		return nil, nil, nil, &InputError{Tool: t.Name, Msg: err.Error()}
	}
	c := &call{kit: k, tool: t, res: k.policy.Resources, paths: map[string]string{}}
	sub := t.subject(in)
	c.reason = sub.Reason
	req := &policy.Request{Tool: t.Name, Group: string(t.Group), Action: sub.Action,
		Command: sub.Command, Elevated: sub.Elevated, DirUnknown: sub.DirUnknown}
	if len(sub.Reads)+len(sub.Writes) > 0 || sub.Command != "" {
		if err := k.facts(ctx, c, req); err != nil {
			return nil, nil, nil, err
		}
	}
	if sub.Dir != "" {
		dir, err := c.resolve(ctx, sub.Dir)
		if err != nil {
			return nil, nil, nil, err
		}
		req.Dir = dir
	}
	for _, group := range []struct {
		paths  []string
		access policy.Access
	}{{sub.Reads, policy.Read}, {sub.Writes, policy.Write}} {
		for _, p := range group.paths {
			abs, err := c.resolve(ctx, p)
			if err != nil {
				return nil, nil, nil, err
			}
			req.Paths = append(req.Paths, policy.PathAccess{Path: abs, Access: group.access})
		}
	}
	return c, in, req, nil
}

// facts fills in what path rules expand: the workspace and the home. Both
// are asked once: a neuron's workdir and its user's home do not change.
func (k *Kit) facts(ctx context.Context, c *call, req *policy.Request) error {
	k.mu.Lock()
	workdir := k.workdir
	k.mu.Unlock()
	if workdir == "" {
		st, err := k.neuron.State(ctx)
		if err != nil {
			return err
		}
		workdir = st.Workdir
		k.mu.Lock()
		k.workdir = workdir
		k.mu.Unlock()
	}
	req.Workspace = workdir
	var err error
	if req.Home, _, err = k.dirs(ctx, c); err != nil {
		return err
	}
	if req.Command != "" {
		_, req.Shell = k.shell(req.Command)
	}
	return nil
}

// workdirKnown returns the workdir if it was asked already ("" if not).
func (k *Kit) workdirKnown() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.workdir
}

// dirs returns the neuron user's home and temporary directory, asked once
// (with whether bash is there: see shell). Without $HOME, "~" patterns
// match nothing rather than everything.
func (k *Kit) dirs(ctx context.Context, c *call) (home, tmp string, err error) {
	k.mu.Lock()
	home, tmp = k.home, k.tmp
	k.mu.Unlock()
	if home != "" {
		return home, tmp, nil
	}
	if d, ok := k.neuron.(*detached); ok {
		// Nothing runs; read commands as the bash a neuron has would.
		k.mu.Lock()
		k.bash = "/usr/bin/bash"
		k.mu.Unlock()
		return d.home, "/tmp", nil
	}
	cl, err := c.channel(ctx)
	if err != nil {
		return "", "", err
	}
	r, err := cl.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/sh", "-c", probeScript}, Env: systemEnv}, MaxOutput: 8192})
	if err != nil {
		return "", "", err
	}
	lines := strings.SplitN(string(r.Stdout), "\n", 3)
	for len(lines) < 3 {
		lines = append(lines, "")
	}
	home, tmp = lines[0], lines[1]
	if r.ExitCode != 0 || !strings.HasPrefix(home, "/") {
		home = "/nonexistent"
	}
	if !strings.HasPrefix(tmp, "/") {
		tmp = "/tmp"
	}
	k.mu.Lock()
	k.home, k.tmp = home, tmp
	if strings.HasPrefix(lines[2], "/") {
		k.bash = lines[2]
	}
	k.mu.Unlock()
	return home, tmp, nil
}

// probeScript prints the neuron user's home, temporary directory, and the
// bash the kit runs commands with: one in the system's directories, named
// by its absolute path, never one PATH finds (/usr/local/bin, which the
// neuron can write, comes first there).
const probeScript = `printf '%s\n%s\n' "$HOME" "${TMPDIR:-/tmp}"; for b in /usr/bin/bash /bin/bash; do if [ -x "$b" ]; then printf '%s' "$b"; break; fi; done`

// systemEnv is the environment of the commands the kit runs for itself:
// only the system's programs (policy.SystemPATH).
var systemEnv = []string{"PATH=" + policy.SystemPATH}

// commandEnv is what the environment of a command the policy judged
// changes: under a policy whose allow rules decide, PATH is the system's
// (policy.Policy.SystemPath), so that ls is /usr/bin/ls.
func (k *Kit) commandEnv() []string {
	if k.policy.SystemPath() {
		return systemEnv
	}
	return nil
}

// shell returns how to run a command line in the neuron, and the dialect
// the policy must read it in: bash where the neuron has it in its system
// directories (what models write), else its POSIX /bin/sh.
func (k *Kit) shell(command string) (argv []string, dialect string) {
	k.mu.Lock()
	bash := k.bash
	k.mu.Unlock()
	if bash != "" {
		return []string{bash, "-c", command}, "bash"
	}
	return []string{"/bin/sh", "-c", command}, "sh"
}

// resolve makes p absolute and symlink-free inside the neuron.
func (c *call) resolve(ctx context.Context, p string) (string, error) {
	if r, ok := c.paths[p]; ok {
		return r, nil
	}
	if p == "" {
		return "", &InputError{Tool: c.tool.Name, Field: "path", Msg: "is empty"}
	}
	if d, ok := c.kit.neuron.(*detached); ok {
		abs := p
		if !path.IsAbs(abs) {
			abs = path.Join(d.workdir, abs)
		}
		abs = path.Clean(abs)
		c.paths[p] = abs
		return abs, nil
	}
	cl, err := c.channel(ctx)
	if err != nil {
		return "", err
	}
	// A path whose rest does not exist is finished lexically by the agent,
	// so "nope/../link/x" comes back with the symlink "link" still in it:
	// resolve the answer again until it no longer changes, so the policy
	// judges, and the tool uses, the path the kernel will open.
	cur := p
	for range 8 {
		r, err := cl.Resolve(ctx, cur)
		if err != nil {
			return "", err
		}
		if r.Path == cur || r.Exists {
			c.paths[p] = r.Path
			return r.Path, nil
		}
		cur = r.Path
	}
	return "", &InputError{Tool: c.tool.Name, Field: "path", Msg: fmt.Sprintf("%s does not settle to one path (symlinks behind missing directories)", p)}
}

// Call runs one tool call through validation, policy, the tool, limits and
// redaction. Failures a model can act on come back as an error Result; the
// Go error is for the caller's own failures (none today: kept for MCP's
// protocol-level errors).
func (k *Kit) Call(ctx context.Context, name string, input json.RawMessage) *Result {
	c, in, req, err := k.prepare(ctx, name, input)
	if err != nil {
		return k.failure(err)
	}
	// The one gate: the kit's agent is judged by the kit's policy (the
	// kit's own record below is the audit fact, with the call's detail).
	d := (&gate.Gate{}).Check(ctx, &gate.Request{Principal: gate.Principal{Kind: gate.Agent, Name: k.agent},
		Neuron: k.neuron.ID(), Action: gate.Tool, Policy: req}, k.policy)
	k.record(c, req, d)
	if d.Effect == policy.Ask {
		approve := k.approve
		if f, ok := ctx.Value(approverKey{}).(Approver); ok && f != nil {
			approve = f
		}
		ok, err := false, error(nil)
		if approve != nil {
			if ok, err = approve(ctx, c.tool, input, d); err == nil && k.audit != nil {
				_ = k.audit.Record("tool.approval", map[string]any{"neuron": k.neuron.ID(), "tool": name, "rule": d.Rule, "approved": ok}) // best effort, as record
			}
		}
		switch {
		case err != nil:
			return k.failure(fmt.Errorf("approval of %s failed: %w", name, err))
		case !ok && approve == nil:
			return &Result{IsError: true, Decision: k.redactDecision(d), Text: fmt.Sprintf("needs approval by policy %q (%s: %s), and this session has no one to approve it; do something else or ask the operator for a policy that allows it", k.policy.Name, d.Rule, d.Reason)}
		case !ok:
			return &Result{IsError: true, Decision: k.redactDecision(d), Text: fmt.Sprintf("not approved (%s: %s)", d.Rule, d.Reason)}
		}
	} else if d.Effect != policy.Allow {
		msg := fmt.Sprintf("denied by policy %q: %s", k.policy.Name, d.Rule)
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		if d.Subject != "" {
			msg += fmt.Sprintf(" (matched %q)", d.Subject)
		}
		return &Result{IsError: true, Decision: k.redactDecision(d), Text: k.redactor.Redact(msg)}
	}
	res, err := c.tool.run(ctx, c, in)
	if err != nil {
		res = k.failure(err)
	}
	res.Decision = k.redactDecision(d)
	res.Text = CapText(k.redactor.Redact(res.Text), c.res.MaxOutputChars) // redact first: a cut must not leave half a secret
	return res
}

// redactDecision returns d with its subject (from the model's input)
// redacted, as the audit log keeps it.
func (k *Kit) redactDecision(d policy.Decision) *policy.Decision {
	d.Subject = k.redactor.Redact(d.Subject)
	return &d
}

// lockPaths serialises calls that read and then write the same files (an
// edit's read, check and write are one step); paths are locked in order.
func (k *Kit) lockPaths(paths ...string) (unlock func()) {
	sorted := slices.Clone(paths)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var held []*sync.Mutex
	for _, p := range sorted {
		k.mu.Lock()
		m, ok := k.locks[p]
		if !ok {
			m = &sync.Mutex{}
			k.locks[p] = m
		}
		k.mu.Unlock()
		m.Lock()
		held = append(held, m)
	}
	return func() {
		for _, m := range held {
			m.Unlock()
		}
	}
}

// failure turns an error into a result a model can act on.
func (k *Kit) failure(err error) *Result {
	var ie *InputError
	var pe *protocol.Error
	switch {
	case errors.As(err, &ie):
		return &Result{IsError: true, Text: ie.Error()}
	case errors.As(err, &pe):
		return &Result{IsError: true, Text: k.redactor.Redact(fmt.Sprintf("%s (%s)", pe.Message, pe.Code))}
	case errors.Is(err, context.Canceled):
		return &Result{IsError: true, Text: "cancelled"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Result{IsError: true, Text: "timed out"}
	}
	return &Result{IsError: true, Text: k.redactor.Redact(err.Error())}
}

// record writes the decision to the audit log. The command and paths are
// redacted; the rest of the input is not logged (it may hold file contents).
func (k *Kit) record(c *call, req *policy.Request, d policy.Decision) {
	if k.audit == nil {
		return
	}
	f := map[string]any{"neuron": k.neuron.ID(), "tool": req.Tool, "effect": string(d.Effect), "rule": d.Rule}
	if k.agent != "" {
		f["agent"] = k.agent
	}
	if d.Reason != "" {
		f["reason"] = d.Reason
	}
	if d.Subject != "" {
		f["subject"] = k.redactor.Redact(d.Subject)
	}
	if req.Command != "" {
		f["command"] = k.redactor.Redact(req.Command)
	}
	if req.Action != "" {
		f["action"] = req.Action
	}
	if len(req.Paths) > 0 {
		var ps []string
		for _, p := range req.Paths {
			ps = append(ps, string(p.Access)+":"+p.Path)
		}
		f["paths"] = ps
	}
	if c.reason != "" {
		f["elevationReason"] = k.redactor.Redact(c.reason)
	}
	// An audit log that cannot be written must not stop the agent, but the
	// error is not lost: the next successful record cannot tell, so say it
	// in the result path instead — here we have no result; keep it simple
	// and best effort, as the launch receipts do.
	_ = k.audit.Record("tool.decision", f)
}

// CapText keeps the head (two thirds) and the tail of s within about max
// bytes, with a note saying how much was cut between; the cuts fall on
// UTF-8 boundaries. A max of 0 or less keeps everything.
func CapText(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	h, t := max*2/3, len(s)-(max-max*2/3)
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return fmt.Sprintf("%s\n[… %d characters cut …]\n%s", s[:h], t-h, s[t:])
}
