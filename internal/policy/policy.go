package policy

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Policy is a complete set of rules for the tool calls of one agent.
//
// A Policy is built by Parse, Load or Preset, which validate and compile it;
// do not modify one after that (build a new one instead), because the
// compiled rules are what Check uses. A Policy built as a Go literal works as
// well, compiled on every Check.
type Policy struct {
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`

	// Groups grants tool groups; a group not listed is denied.
	Groups map[string]Effect `json:"groups,omitempty"`
	// Tools overrides Groups for one tool ("bash") or one tool action
	// ("neuron.restart"); the action form is the more specific.
	Tools map[string]Effect `json:"tools,omitempty"`
	// Paths are checked against every path a request touches; all matching
	// rules count and the most severe wins. A path no rule matches is allowed.
	Paths []PathRule `json:"paths,omitempty"`
	// Commands are checked against every simple command of a request's
	// shell source; all matching rules count and the most severe wins.
	Commands []CommandRule `json:"commands,omitempty"`
	// CommandDefault is the effect for a simple command no rule matches
	// (default allow).
	CommandDefault Effect `json:"commandDefault,omitempty"`
	// Elevation is what an Elevated request gets (default deny).
	Elevation Effect `json:"elevation,omitempty"`
	// WriteRedirects is the effect of a shell output redirection to a file
	// (default allow). /dev/null, /dev/stdout, /dev/stderr and file
	// descriptors are always allowed.
	WriteRedirects Effect `json:"writeRedirects,omitempty"`
	// PipeToShell is the effect of a shell or interpreter reading its script
	// from a pipeline fed by curl or wget (default allow).
	PipeToShell Effect `json:"pipeToShell,omitempty"`
	// ForkBomb is the effect of defining a function named ":" or a function
	// that runs itself in the background or in a pipeline (default deny).
	ForkBomb Effect `json:"forkBomb,omitempty"`
	// DynamicCommand is the effect of a command whose name is not known
	// before it runs ($CMD, "$(which rm)", the command of `xargs env`, a
	// script in a variable) (default ask; deny when CommandDefault is deny).
	DynamicCommand Effect `json:"dynamicCommand,omitempty"`
	// DynamicArgument is the effect of a command one of whose words, only
	// known at run time, could make a rule with a more severe effect match
	// ("sort $X" when X may hold --output=f) (default allow, which reads
	// such words as placeholders; deny when CommandDefault is deny).
	DynamicArgument Effect `json:"dynamicArgument,omitempty"`
	// RuntimeEval is the effect of a construct in which bash evaluates text
	// it only reads at run time: arithmetic on variables ($((x)), let,
	// [[ x -eq 0 ]]), test -v, printf -v, read, declare -i and -n, ${!x},
	// ${x@P} (default allow; deny when CommandDefault is deny).
	RuntimeEval Effect `json:"runtimeEval,omitempty"`
	// EnvAssignment is the effect of setting an environment variable other
	// than LANG, LANGUAGE, LC_*, TZ, COLUMNS, LINES and NO_COLOR (a name with
	// a lower-case letter is a shell variable and always fine), in any form:
	// PATH=x cmd, export, env NAME=x, for NAME in, read NAME (default
	// allow; deny when CommandDefault is deny).
	EnvAssignment Effect `json:"envAssignment,omitempty"`

	Resources Resources `json:"resources"`

	compiled *compiled
}

// SystemPath reports whether commands judged by p must run with PATH set
// to SystemPATH, and their shell be named by its absolute path: p's allow
// rules decide (its commandDefault is not allow), and an allow rule for ls
// means the system's ls, which a bare name is only when PATH holds nothing
// the neuron can write (a planted /usr/local/bin/ls would run instead). A
// policy that does not compile says yes.
func (p *Policy) SystemPath() bool {
	c, err := p.compiledPolicy()
	return err != nil || c.commandDefault != Allow
}

// Resources caps what one tool call may use.
type Resources struct {
	MaxOutputChars int      `json:"maxOutputChars,omitempty"` // cap on text a tool returns
	DefaultTimeout Duration `json:"defaultTimeout,omitempty"` // bash timeout when the call names none
	MaxTimeout     Duration `json:"maxTimeout,omitempty"`     // largest timeout a call may ask for
	MaxFileBytes   int64    `json:"maxFileBytes,omitempty"`   // largest file read/write/edit may touch
}

// DefaultResources returns the resources a policy gets for fields it leaves
// zero: 30000 output characters, 120s default and 600s maximum timeout, 10 MiB
// files.
func DefaultResources() Resources {
	return Resources{
		MaxOutputChars: 30000,
		DefaultTimeout: Duration(120e9),
		MaxTimeout:     Duration(600e9),
		MaxFileBytes:   10 << 20,
	}
}

// PathRule applies an effect to the paths matching a doublestar glob.
type PathRule struct {
	// Pattern is a doublestar glob over absolute paths; a leading "~" is the
	// neuron user's home and "$WORKSPACE" the neuron's workdir. "/etc/**"
	// also matches "/etc".
	Pattern string `json:"pattern"`
	// Access limits the rule to reads or writes; empty means both.
	Access   Access    `json:"access,omitempty"`
	Effect   Effect    `json:"effect"`
	Reason   string    `json:"reason,omitempty"`
	Examples *Examples `json:"examples,omitempty"`
}

// CommandRule applies an effect to the simple commands its Match matches; see
// docs/policy.md for the matching rules.
type CommandRule struct {
	Match    string    `json:"match"`
	Effect   Effect    `json:"effect"`
	Reason   string    `json:"reason,omitempty"`
	Examples *Examples `json:"examples,omitempty"`
}

// Examples are checked when a rule loads: every Match entry must match the
// rule and no NoMatch entry may. For a PathRule they are paths, for a
// CommandRule shell command lines. In examples, "~" is /home/user and
// $WORKSPACE is /workspace.
type Examples struct {
	Match   []string `json:"match,omitempty"`
	NoMatch []string `json:"noMatch,omitempty"`
}

// Example environment used to check rule examples.
const (
	ExampleHome      = "/home/user"
	ExampleWorkspace = "/workspace"
)

// Error is a policy that cannot be loaded. Field names the offending part,
// e.g. "commands[3].match" or "groups.exec".
type Error struct {
	Field string
	Err   error
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "policy: " + e.Err.Error()
	}
	return "policy: " + e.Field + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Class is errdefs.Invalid: the policy is wrong.
func (e *Error) Class() errdefs.Class { return errdefs.Invalid }

// IsInvalid reports whether err says a policy could not be loaded.
func IsInvalid(err error) bool {
	var pe *Error
	return errors.As(err, &pe)
}

func fieldErr(field, format string, args ...any) error {
	return &Error{Field: field, Err: fmt.Errorf(format, args...)}
}

//go:embed presets/*.json
var presetFS embed.FS

var presetNames = []string{"readonly", "standard", "trusted"}

// PresetNames returns the names of the built-in policies.
func PresetNames() []string { return slices.Clone(presetNames) }

// Preset returns a fresh copy of the built-in policy called name.
func Preset(name string) (*Policy, error) {
	if !slices.Contains(presetNames, name) {
		return nil, &Error{Err: fmt.Errorf("unknown preset %q (want one of %s)", name, strings.Join(presetNames, ", "))}
	}
	data, err := presetFS.ReadFile("presets/" + name + ".json")
	if err != nil {
		return nil, &Error{Err: fmt.Errorf("preset %s: %w", name, err)}
	}
	p, err := parse(data, false)
	if err != nil {
		return nil, fmt.Errorf("preset %s: %w", name, err)
	}
	return p, nil
}

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Err: fmt.Errorf("read policy file: %w", err)}
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse reads a JSON policy. Unknown fields are refused and every rule is
// validated, its examples included. With "extends": "<preset>" the policy
// starts from that preset: groups, tools and scalar fields set in the file
// override it, and paths and commands are appended after the preset's.
func Parse(data []byte) (*Policy, error) { return parse(data, true) }

type fileFormat struct {
	Extends string `json:"extends,omitempty"`
	Policy
}

func parse(data []byte, allowExtends bool) (*Policy, error) {
	var f fileFormat
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, &Error{Err: fmt.Errorf("decode JSON: %w", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Error{Err: errors.New("decode JSON: trailing data after the policy object")}
	}
	// Validate the file's own rules first so errors carry the file's indices.
	own := f.Policy
	if _, err := compile(&own); err != nil {
		return nil, err
	}
	p := &f.Policy
	if f.Extends != "" {
		if !allowExtends {
			return nil, fieldErr("extends", "a preset cannot extend another policy")
		}
		base, err := Preset(f.Extends)
		if err != nil {
			return nil, &Error{Field: "extends", Err: err}
		}
		p = merge(base, &f.Policy)
	}
	p.Resources = p.Resources.withDefaults()
	c, err := compile(p)
	if err != nil {
		return nil, err
	}
	p.compiled = c
	return p, nil
}

// merge lays over on top of base.
func merge(base, over *Policy) *Policy {
	p := *base
	p.compiled = nil
	if over.Name != "" {
		p.Name = over.Name
	}
	if over.Description != "" {
		p.Description = over.Description
	}
	p.Groups = mergeMap(base.Groups, over.Groups)
	p.Tools = mergeMap(base.Tools, over.Tools)
	p.Paths = append(slices.Clone(base.Paths), over.Paths...)
	p.Commands = append(slices.Clone(base.Commands), over.Commands...)
	for _, f := range []struct{ dst, src *Effect }{
		{&p.CommandDefault, &over.CommandDefault},
		{&p.Elevation, &over.Elevation},
		{&p.WriteRedirects, &over.WriteRedirects},
		{&p.PipeToShell, &over.PipeToShell},
		{&p.ForkBomb, &over.ForkBomb},
		{&p.DynamicCommand, &over.DynamicCommand},
		{&p.DynamicArgument, &over.DynamicArgument},
		{&p.RuntimeEval, &over.RuntimeEval},
		{&p.EnvAssignment, &over.EnvAssignment},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	r := over.Resources
	if r.MaxOutputChars != 0 {
		p.Resources.MaxOutputChars = r.MaxOutputChars
	}
	if r.DefaultTimeout != 0 {
		p.Resources.DefaultTimeout = r.DefaultTimeout
	}
	if r.MaxTimeout != 0 {
		p.Resources.MaxTimeout = r.MaxTimeout
	}
	if r.MaxFileBytes != 0 {
		p.Resources.MaxFileBytes = r.MaxFileBytes
	}
	return &p
}

func mergeMap(a, b map[string]Effect) map[string]Effect {
	if a == nil && b == nil {
		return nil
	}
	m := make(map[string]Effect, len(a)+len(b))
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

func (r Resources) withDefaults() Resources {
	d := DefaultResources()
	if r.MaxOutputChars == 0 {
		r.MaxOutputChars = d.MaxOutputChars
	}
	if r.DefaultTimeout == 0 {
		r.DefaultTimeout = d.DefaultTimeout
	}
	if r.MaxTimeout == 0 {
		r.MaxTimeout = d.MaxTimeout
	}
	if r.MaxFileBytes == 0 {
		r.MaxFileBytes = d.MaxFileBytes
	}
	return r
}

func validateResources(r Resources) error {
	switch {
	case r.MaxOutputChars < 0:
		return fieldErr("resources.maxOutputChars", "must not be negative")
	case r.MaxFileBytes < 0:
		return fieldErr("resources.maxFileBytes", "must not be negative")
	case r.MaxTimeout != 0 && r.DefaultTimeout > r.MaxTimeout:
		return fieldErr("resources.defaultTimeout", "%s exceeds maxTimeout %s", r.DefaultTimeout, r.MaxTimeout)
	}
	return nil
}

func validateEffectMap(field string, m map[string]Effect) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			return fieldErr(field, "empty name")
		}
		if !m[k].Valid() {
			return fieldErr(field+"."+k, "invalid effect %q (want allow, ask or deny)", m[k])
		}
	}
	return nil
}

func validateOptionalEffect(field string, e Effect) error {
	if e != "" && !e.Valid() {
		return fieldErr(field, "invalid effect %q (want allow, ask or deny)", e)
	}
	return nil
}
