// Package gate is the one authorization point of every action on a
// neuron. Every entry point — the local CLI, the HTTP API (and the SDK
// through it), /ctx writes, the tool kit (chat, MCP, tools), launch —
// asks it before it acts: (principal, neuron, action, arguments) in;
// allow, ask or deny, and an audit fact, out. A new plane (the E2B API, a
// console) calls Check too; nothing else decides.
//
// Who is governed by what:
//   - the operator (the local CLI of the home's user, the API with the
//     daemon's token) by nothing: every action is allowed, and recorded;
//   - an API key (nsys-cortex token create) by its scopes and its
//     selector: an action outside its scopes is denied, and a neuron whose
//     labels its selector does not match is hidden (the API answers it as
//     a neuron that does not exist);
//   - a tool kit's agent by the kit's policy (internal/policy);
//   - a neuron acting on the host through its own /ctx by the policy that
//     governs the neuron: the one its tool kit was last opened with
//     (recorded with the neuron, see RecordPolicy), else standard.
//
// An ask that nobody can answer (a /ctx write) is a deny.
package gate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Kind says what kind of principal acts.
type Kind string

// Principal kinds.
const (
	// Operator is the home's user: the local CLI, the API's admin token.
	Operator Kind = "operator"
	// APIClient is a client of the daemon's API (with its token).
	APIClient Kind = "api"
	// Agent is an agent driving a neuron through a tool kit.
	Agent Kind = "agent"
	// Neuron is a neuron acting on the host itself (a /ctx write of its uid).
	Neuron Kind = "neuron"
)

// Principal is who acts.
type Principal struct {
	Kind Kind
	// Name tells principals of a kind apart (a key's name, a neuron's id,
	// an agent's session); empty for the operator.
	Name string
	// Scopes, for an API key, are what it may do (nil: everything, the
	// daemon's own token). See ScopeOf.
	Scopes []Scope
	// Selector, for an API key, picks the neurons it sees: by their
	// labels (Request.Labels). The zero selector sees every neuron.
	Selector labels.Selector
}

// Scope is a class of actions an API key may be given.
type Scope string

// The scopes. Every scope lets a key read what the host knows of the
// neurons it sees (Read), as a key that may exec in a neuron may see it.
const (
	ScopeRead      Scope = "read"      // status, lists, events, metrics, snapshot lists
	ScopeExec      Scope = "exec"      // exec, background processes, the neuron's ports
	ScopeFiles     Scope = "files"     // reading and writing files, diffs
	ScopeTerminals Scope = "terminals" // terminals
	ScopeAdmin     Scope = "admin"     // everything: create, destroy, labels, snapshots, fork, export, import, sessions
)

// Scopes lists the scopes, in the order above.
var Scopes = []Scope{ScopeRead, ScopeExec, ScopeFiles, ScopeTerminals, ScopeAdmin}

// ScopeOf is the scope that allows action a (admin allows every one).
func ScopeOf(a Action) Scope {
	switch a {
	case Read, SnapshotRead:
		return ScopeRead
	case Exec, ProcessStart, ProcessSignal, ProcessInput, ProcessRead, Port:
		return ScopeExec
	case FileRead, FileWrite:
		return ScopeFiles
	case TerminalOpen, TerminalInput, TerminalControl:
		return ScopeTerminals
	}
	return ScopeAdmin
}

// Allows reports whether p's scopes allow action a.
func (p Principal) Allows(a Action) bool {
	if p.Scopes == nil {
		return true
	}
	need := ScopeOf(a)
	for _, s := range p.Scopes {
		if s == need || s == ScopeAdmin || need == ScopeRead {
			return true
		}
	}
	return false
}

// Sees reports whether p may know of a neuron with these labels.
func (p Principal) Sees(l labels.Set) bool { return p.Selector.Matches(l) }

func (p Principal) String() string {
	if p.Name == "" {
		return string(p.Kind)
	}
	return string(p.Kind) + ":" + p.Name
}

// Action is what is done to a neuron.
type Action string

// The actions. Each has its place in the policy's vocabulary (a tool
// group, a tool and an action) so that a principal governed by a policy
// is judged by the same rules the tool kit's calls are.
const (
	Create          Action = "neuron.create"
	Destroy         Action = "neuron.destroy"
	Restart         Action = "neuron.restart"
	Read            Action = "neuron.read" // status, health, lists, metrics, events: reading what the host knows
	Label           Action = "neuron.label"
	Timeout         Action = "neuron.timeout" // set or clear a deadline
	Pause           Action = "neuron.pause"
	Resume          Action = "neuron.resume"
	Fork            Action = "neuron.fork"   // on the source: its data, read whole, becomes new neurons
	Port            Action = "neuron.port"   // reach a port on the neuron's own loopback (port-forward, the API's proxy)
	Export          Action = "neuron.export" // its data, read whole into an archive
	Import          Action = "neuron.import" // a new neuron made from an archive
	Exec            Action = "exec"
	ProcessStart    Action = "process.start"
	ProcessSignal   Action = "process.signal"
	ProcessInput    Action = "process.input"
	ProcessRead     Action = "process.read"
	FileRead        Action = "files.read"
	FileWrite       Action = "files.write"
	TerminalOpen    Action = "terminal.open"
	TerminalInput   Action = "terminal.input"
	TerminalControl Action = "terminal.control"
	SnapshotCreate  Action = "snapshot.create"
	SnapshotRestore Action = "snapshot.restore"
	SnapshotRemove  Action = "snapshot.remove"
	SnapshotRead    Action = "snapshot.read"
	Launch          Action = "launch"
	Session         Action = "session" // a chat session: its tool calls are judged one by one
	// Tool is a tool kit's call, judged by the policy request it carries
	// (Request.Policy: its tool, command and paths).
	Tool Action = "tool"
)

// place is where an action sits in the policy's vocabulary.
type place struct{ group, tool, action string }

var places = map[Action]place{
	Create:          {"neuron", "neuron", "create"},
	Destroy:         {"neuron", "neuron", "destroy"},
	Restart:         {"neuron", "neuron", "restart"},
	Read:            {"neuron", "neuron", "status"},
	Label:           {"neuron", "neuron", "label"},
	Timeout:         {"neuron", "neuron", "timeout"},
	Pause:           {"neuron", "neuron", "pause"},
	Resume:          {"neuron", "neuron", "resume"},
	Fork:            {"neuron", "neuron", "fork"},
	Port:            {"neuron", "neuron", "port"},
	Export:          {"neuron", "neuron", "export"},
	Import:          {"neuron", "neuron", "import"},
	Exec:            {"exec", "bash", ""},
	ProcessStart:    {"exec", "process", "start"},
	ProcessSignal:   {"exec", "process", "kill"},
	ProcessInput:    {"exec", "process", "write"},
	ProcessRead:     {"exec", "process", "output"},
	FileRead:        {"fs_read", "read", ""},
	FileWrite:       {"fs_write", "write", ""},
	TerminalOpen:    {"exec", "bash", ""},
	TerminalInput:   {"exec", "bash", ""},
	TerminalControl: {"exec", "process", "kill"},
	SnapshotCreate:  {"snapshot", "snapshot", "create"},
	SnapshotRestore: {"snapshot", "snapshot", "restore"},
	SnapshotRemove:  {"snapshot", "snapshot", "remove"},
	SnapshotRead:    {"snapshot", "snapshot", "list"},
	Launch:          {"exec", "bash", ""},
	Session:         {"sessions", "sessions_spawn", ""},
	Tool:            {"", "", ""},
}

// Actions lists every action (for tests that walk them).
func Actions() []Action {
	out := make([]Action, 0, len(places))
	for a := range places {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Known reports whether a is one of the actions.
func Known(a Action) bool { _, ok := places[a]; return ok }

// Request is one action to authorize.
type Request struct {
	Principal Principal
	Neuron    string // "" for an action on no neuron yet (a create without an id)
	// Labels are the neuron's labels, which a principal's selector is
	// matched against (the caller looks them up for such a principal).
	Labels labels.Set
	Action Action
	// Detail is what the audit fact says of the arguments (a snapshot's
	// name, a signal); never file contents or secrets.
	Detail string
	// Policy, when set, is the whole request as the policy engine reads it
	// (a tool kit's call: its command, its paths); otherwise it is made
	// from Action.
	Policy *policy.Request
}

// Auditor records facts.
type Auditor interface {
	Record(event string, fields map[string]any) error
}

// Gate decides. The zero value allows the operator and judges everyone
// else by the standard preset, recording nothing.
type Gate struct {
	// Audit receives one fact per decision (nil: none).
	Audit Auditor
	// Layout finds the policies recorded with neurons (the zero value:
	// none, standard for every neuron).
	Layout layout.Layout
	// AuditReads records allowed reads too (they are left out otherwise).
	AuditReads bool
}

// Check decides r. p is the policy of an Agent principal (its tool kit's);
// other principals' policies are the gate's to find.
func (g *Gate) Check(ctx context.Context, r *Request, p *policy.Policy) policy.Decision {
	d := g.decide(r, p)
	g.record(r, d)
	return d
}

// Allow is Check for entry points with nobody to ask: an ask is a deny.
// It returns nil or an error saying which rule denied what.
func (g *Gate) Allow(ctx context.Context, r *Request, p *policy.Policy) error {
	d := g.Check(ctx, r, p)
	if d.Effect == policy.Allow {
		return nil
	}
	return &DeniedError{Request: *r, Decision: d}
}

func (g *Gate) decide(r *Request, p *policy.Policy) policy.Decision {
	pl, ok := places[r.Action]
	if !ok {
		return policy.Decision{Effect: policy.Deny, Rule: "gate", Reason: fmt.Sprintf("unknown action %q", r.Action)}
	}
	switch r.Principal.Kind {
	case APIClient:
		if r.Action == Session && !r.Principal.Selector.Empty() {
			return policy.Decision{Effect: policy.Deny, Rule: "gate sessions",
				Reason: "a chat session drives neurons of its own choosing, and a key with a selector sees only some"}
		}
		if r.Neuron != "" && !r.Principal.Sees(r.Labels) {
			return policy.Decision{Effect: policy.Deny, Rule: RuleHidden,
				Reason: fmt.Sprintf("its labels are outside the key's selector %s", r.Principal.Selector)}
		}
		if !r.Principal.Allows(r.Action) {
			return policy.Decision{Effect: policy.Deny, Rule: "gate scopes",
				Reason: fmt.Sprintf("the key's scopes are %s; %s needs %s", scopeList(r.Principal.Scopes), r.Action, ScopeOf(r.Action))}
		}
		if r.Principal.Scopes != nil {
			return policy.Decision{Effect: policy.Allow, Rule: "gate scopes", Reason: "within the key's scopes"}
		}
		return policy.Decision{Effect: policy.Allow, Rule: "gate api", Reason: "the operator may do anything"}
	case Operator:
		return policy.Decision{Effect: policy.Allow, Rule: "gate " + string(r.Principal.Kind), Reason: "the operator may do anything"}
	case Agent:
		if p == nil {
			return policy.Decision{Effect: policy.Deny, Rule: "gate", Reason: "an agent without a policy"}
		}
	case Neuron:
		var err error
		if p, err = g.NeuronPolicy(r.Principal.Name); err != nil {
			return policy.Decision{Effect: policy.Deny, Rule: "gate", Reason: err.Error()}
		}
	default:
		return policy.Decision{Effect: policy.Deny, Rule: "gate", Reason: fmt.Sprintf("unknown principal %q", r.Principal)}
	}
	req := r.Policy
	if req == nil && r.Action == Tool {
		return policy.Decision{Effect: policy.Deny, Rule: "gate", Reason: "a tool call without its request"}
	}
	if req == nil {
		req = &policy.Request{Tool: pl.tool, Group: pl.group, Action: pl.action}
		if pl.group == "exec" && pl.action == "" {
			// Input whose command the gate cannot read (a terminal's
			// keystrokes): the policy's rule for a command it cannot see.
			req.Command = "$CORTEX_UNSEEN_COMMAND"
		}
	}
	d := p.Check(req)
	if d.Effect != policy.Allow && r.Principal.Kind == Neuron {
		// Whose policy it is (an agent's caller names its own).
		d.Reason = fmt.Sprintf("policy %q, the neuron's: %s", p.Name, d.Reason)
	}
	return d
}

func (g *Gate) record(r *Request, d policy.Decision) {
	// Reads the operator makes (a status, a list: what a dashboard polls)
	// are not facts worth a line each; everything else is.
	if g.Audit == nil || !g.AuditReads && d.Effect == policy.Allow && (r.Action == Read || r.Action == SnapshotRead) && r.Principal.Kind != Neuron {
		return
	}
	// Bounded: a neuron id comes from a request's path before it is
	// checked, and one fact must not fill the log (or a cluster's copy).
	f := map[string]any{"principal": clip(r.Principal.String(), clipShort), "action": clip(string(r.Action), clipShort),
		"effect": string(d.Effect), "rule": d.Rule}
	if r.Neuron != "" {
		f["neuron"] = clip(r.Neuron, clipShort)
	}
	if r.Detail != "" {
		f["detail"] = clip(r.Detail, clipShort)
	}
	if d.Effect != policy.Allow && d.Reason != "" {
		f["reason"] = clip(d.Reason, clipLong)
	}
	_ = g.Audit.Record("gate", f) // an audit log that cannot be written does not stop the host
}

// The most bytes of a field an audit fact keeps.
const clipShort, clipLong = 256, 2048

// clip cuts s to at most n bytes (on a character boundary), saying how
// long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:cut], len(s))
}

// RuleHidden is the rule of a decision that denies a key a neuron it
// does not see: its callers answer as for a neuron that does not exist, so
// a tenant learns nothing of another's ids.
const RuleHidden = "gate selector"

// Hidden reports whether err is the gate hiding a neuron from a key.
func Hidden(err error) bool {
	var de *DeniedError
	return errors.As(err, &de) && de.Decision.Rule == RuleHidden
}

func scopeList(s []Scope) string {
	if len(s) == 0 {
		return "none"
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return strings.Join(out, ",")
}

// ParseScopes reads a comma-separated list of scopes (repeats dropped).
func ParseScopes(list string) ([]Scope, error) {
	var out []Scope
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, s := range Scopes {
			ok = ok || string(s) == f
		}
		if !ok {
			return nil, fmt.Errorf("unknown scope %q (the scopes: %s)", f, scopeList(Scopes))
		}
		if !slices.Contains(out, Scope(f)) {
			out = append(out, Scope(f))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scope given (the scopes: %s)", scopeList(Scopes))
	}
	return out, nil
}

// DeniedError is an action the gate refused.
type DeniedError struct {
	Request  Request
	Decision policy.Decision
}

// Class is errdefs.PolicyDenied.
func (e *DeniedError) Class() errdefs.Class { return errdefs.PolicyDenied }

func (e *DeniedError) Error() string {
	msg := fmt.Sprintf("%s may not %s", e.Request.Principal, e.Request.Action)
	if e.Request.Neuron != "" {
		msg += " on neuron " + e.Request.Neuron
	}
	msg += ": " + e.Decision.Rule
	if e.Decision.Reason != "" {
		msg += " (" + e.Decision.Reason + ")"
	}
	if e.Decision.Effect == policy.Ask {
		msg += "; it needs approval, and nobody is asked here"
	}
	return msg
}

// policyFile holds the policy that governs a neuron (a host record).
func policyFile(lay layout.Layout, id string) string {
	return filepath.Join(lay.OverlayDir(id), ".policy.json")
}

// RecordPolicy makes p the policy that governs neuron id's own requests
// to the host (its /ctx writes): a tool kit calls it when it opens the
// neuron, so the neuron can do through /ctx no more than its agent may.
func RecordPolicy(lay layout.Layout, id string, p *policy.Policy) error {
	if lay.Overlays == "" {
		return nil
	}
	if _, err := os.Stat(lay.OverlayDir(id)); err != nil {
		return nil // no neuron (yet): nothing to govern
	}
	return store.WriteJSON(policyFile(lay, id), p, 0o600)
}

// NeuronPolicy returns the policy that governs neuron id's own requests:
// the one recorded with it, else the standard preset.
func (g *Gate) NeuronPolicy(id string) (*policy.Policy, error) {
	if g.Layout.Overlays != "" {
		b, err := os.ReadFile(policyFile(g.Layout, id))
		if err == nil {
			p, err := policy.Parse(b)
			if err != nil {
				return nil, fmt.Errorf("the policy recorded with neuron %s: %w", id, err)
			}
			return p, nil
		}
	}
	return policy.Preset("standard")
}
