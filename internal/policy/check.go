package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"mvdan.cc/sh/v3/syntax"
)

// Request is one tool call to decide on.
type Request struct {
	Tool   string // "bash", "read", "mcp__github__create_issue", ...
	Group  string // "fs_read", "fs_write", "exec", "elevated", "neuron", "memory", "mcp", ...
	Action string // optional sub-action: "restart" for the neuron tool, "kill" for process
	// Paths the call touches: absolute, cleaned and symlink-resolved by the
	// caller, which resolves them through the neuron.
	Paths []PathAccess
	// Command is shell source for exec tools; "" when none.
	Command string
	// Elevated marks the `elevated` tool: command rules are not applied and
	// the policy's Elevation effect decides.
	Elevated bool
	// Workspace is the neuron's workdir, for $WORKSPACE in patterns.
	Workspace string
	// Home is the neuron user's home, for ~ in patterns. When empty, ~ in a
	// path pattern matches any directory.
	Home string
	// Shell is what runs Command: "bash" (the default) or "sh" (a POSIX
	// shell such as dash or busybox sh); Command is parsed as it reads it.
	Shell string
	// Dir is the absolute, resolved directory Command starts in; empty
	// means Workspace. Relative paths in Command are resolved against it.
	Dir string
	// DirUnknown says Command runs in a directory only known at run time
	// (text typed into a running shell, which may have changed it):
	// relative paths in it are anywhere.
	DirUnknown bool
}

// PathAccess is one path a request touches and how.
type PathAccess struct {
	Path   string
	Access Access
}

// Decision is the outcome of one check, or of a whole request.
type Decision struct {
	Effect Effect
	// Rule names what decided, stably: `commands[3] deny "rm -rf /"`,
	// `paths[0] deny "**/.ssh/**" (read)`, `groups.fs_write deny`, `default`.
	Rule string
	// Reason is the rule's justification.
	Reason string
	// Subject is what the rule matched: a path, or a simple command as words.
	Subject string
}

// Explanation is a decision with every check that led to it, in order.
type Explanation struct {
	Decision Decision
	Checks   []Decision
}

// Labels of the built-in checks, as they appear in Decision.Rule.
const (
	RuleDefault        = "default"
	RuleInvalidPolicy  = "invalid policy"
	RuleInvalidPath    = "paths (invalid)"
	RuleNoPathRule     = "paths (no rule)"
	RuleParseError     = "parse error"
	RuleNestingLimit   = "nesting limit"
	RuleCommandDefault = "commandDefault"
	RuleDynamicCommand = "dynamicCommand"
	RuleDynamicArg     = "dynamicArgument"
	RuleRuntimeEval    = "runtimeEval"
	RuleEnvAssignment  = "envAssignment"
	RuleWriteRedirects = "writeRedirects"
	RulePipeToShell    = "pipeToShell"
	RuleForkBomb       = "forkBomb"
	RuleElevation      = "elevation"
)

// compiled is a validated policy ready for Check.
type compiled struct {
	groups, tools  map[string]Effect
	paths          []pathRule
	commands       []*cmdRule
	commandDefault Effect
	elevation      Effect
	writeRedirects Effect
	pipeToShell    Effect
	forkBomb       Effect
	dynamicCommand Effect
	dynamicArg     Effect
	runtimeEval    Effect
	envAssignment  Effect
}

type pathRule struct {
	PathRule
	label string
}

func compile(p *Policy) (*compiled, error) {
	if err := validateEffectMap("groups", p.Groups); err != nil {
		return nil, err
	}
	if err := validateEffectMap("tools", p.Tools); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		e    Effect
	}{
		{"commandDefault", p.CommandDefault}, {"elevation", p.Elevation},
		{"writeRedirects", p.WriteRedirects}, {"pipeToShell", p.PipeToShell},
		{"forkBomb", p.ForkBomb}, {"dynamicCommand", p.DynamicCommand},
		{"dynamicArgument", p.DynamicArgument}, {"runtimeEval", p.RuntimeEval},
		{"envAssignment", p.EnvAssignment},
	} {
		if err := validateOptionalEffect(f.name, f.e); err != nil {
			return nil, err
		}
	}
	if err := validateResources(p.Resources); err != nil {
		return nil, err
	}
	c := &compiled{
		groups:         p.Groups,
		tools:          p.Tools,
		commandDefault: orDefault(p.CommandDefault, Allow),
		elevation:      orDefault(p.Elevation, Deny),
		writeRedirects: orDefault(p.WriteRedirects, Allow),
		pipeToShell:    orDefault(p.PipeToShell, Allow),
		forkBomb:       orDefault(p.ForkBomb, Deny),
		dynamicCommand: orDefault(p.DynamicCommand, Ask),
		dynamicArg:     orDefault(p.DynamicArgument, Allow),
		runtimeEval:    orDefault(p.RuntimeEval, Allow),
		envAssignment:  orDefault(p.EnvAssignment, Allow),
	}
	if c.commandDefault == Deny {
		// An allow-list holds only if what it cannot read is refused.
		c.dynamicCommand, c.dynamicArg, c.runtimeEval, c.envAssignment = Deny, Deny, Deny, Deny
	}
	for i, r := range p.Paths {
		pr, err := compilePathRule(i, r)
		if err != nil {
			return nil, err
		}
		c.paths = append(c.paths, pr)
	}
	for i, r := range p.Commands {
		cr, err := compileCommandRule(i, r)
		if err != nil {
			return nil, err
		}
		c.commands = append(c.commands, cr)
	}
	return c, nil
}

func orDefault(e, d Effect) Effect {
	if e == "" {
		return d
	}
	return e
}

func compilePathRule(i int, r PathRule) (pathRule, error) {
	field := fmt.Sprintf("paths[%d]", i)
	if !r.Effect.Valid() {
		return pathRule{}, fieldErr(field+".effect", "invalid effect %q (want allow, ask or deny)", r.Effect)
	}
	if r.Access != "" && r.Access != Read && r.Access != Write {
		return pathRule{}, fieldErr(field+".access", "invalid access %q (want read, write or empty for both)", r.Access)
	}
	if r.Pattern == "" {
		return pathRule{}, fieldErr(field+".pattern", "empty pattern")
	}
	ex := env{home: ExampleHome, workspace: ExampleWorkspace}
	if !doublestar.ValidatePattern(expandPattern(r.Pattern, ex)) {
		return pathRule{}, fieldErr(field+".pattern", "%q is a bad glob", r.Pattern)
	}
	if p := expandPattern(r.Pattern, ex); !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "**") {
		return pathRule{}, fieldErr(field+".pattern", "%q must be absolute or start with ~, $WORKSPACE or **", r.Pattern)
	}
	label := fmt.Sprintf("paths[%d] %s %q", i, r.Effect, r.Pattern)
	if r.Access != "" {
		label += " (" + string(r.Access) + ")"
	}
	pr := pathRule{PathRule: r, label: label}
	if r.Examples != nil {
		for j, m := range r.Examples.Match {
			if !pr.matches(expandExample(m, ex), ex) {
				return pathRule{}, fieldErr(fmt.Sprintf("%s.examples.match[%d]", field, j), "%q does not match %q", m, r.Pattern)
			}
		}
		for j, m := range r.Examples.NoMatch {
			if pr.matches(expandExample(m, ex), ex) {
				return pathRule{}, fieldErr(fmt.Sprintf("%s.examples.noMatch[%d]", field, j), "%q matches %q", m, r.Pattern)
			}
		}
	}
	return pr, nil
}

func expandExample(p string, e env) string {
	return normalizePath(p, e, false)
}

// expandPattern expands a leading ~ (or $HOME) and $WORKSPACE in a path
// pattern. An unknown home or workspace matches any directory.
func expandPattern(p string, e env) string {
	sub := func(prefix, val string) (string, bool) {
		if p != prefix && !strings.HasPrefix(p, prefix+"/") {
			return "", false
		}
		if val == "" {
			return "/**" + p[len(prefix):], true
		}
		return escapeGlob(strings.TrimRight(val, "/")) + p[len(prefix):], true
	}
	for _, s := range []struct{ prefix, val string }{{"~", e.home}, {"$HOME", e.home}, {"${HOME}", e.home}, {"$WORKSPACE", e.workspace}, {"${WORKSPACE}", e.workspace}} {
		if out, ok := sub(s.prefix, s.val); ok {
			return out
		}
	}
	return p
}

func (r *pathRule) matches(p string, e env) bool {
	ok, err := doublestar.Match(expandPattern(r.Pattern, e), p)
	return err == nil && ok
}

func (p *Policy) compiledPolicy() (*compiled, error) {
	if p.compiled != nil {
		return p.compiled, nil
	}
	cp := *p
	cp.Resources = cp.Resources.withDefaults()
	return compile(&cp)
}

// Check decides a request: the most severe effect of all its checks, and the
// first check that had it. A nil request is denied.
func (p *Policy) Check(r *Request) Decision {
	return p.evaluate(r, true).Decision
}

// Explain is Check with every individual check it made, in order.
func (p *Policy) Explain(r *Request) Explanation {
	return p.evaluate(r, false)
}

func (p *Policy) evaluate(r *Request, stopAtDeny bool) Explanation {
	if r == nil {
		d := Decision{Effect: Deny, Rule: RuleDefault, Reason: "no request"}
		return Explanation{Decision: d, Checks: []Decision{d}}
	}
	c, err := p.compiledPolicy()
	if err != nil {
		d := Decision{Effect: Deny, Rule: RuleInvalidPolicy, Reason: err.Error()}
		return Explanation{Decision: d, Checks: []Decision{d}}
	}
	ck := &checker{c: c, env: env{home: r.Home, workspace: r.Workspace, cwd: startDirs(r)}, stopAtDeny: stopAtDeny}
	ck.add(c.checkTool(r))
	for _, pa := range r.Paths {
		if ck.done() {
			break
		}
		ck.checkPath(pa.Path, pa.Access)
	}
	if r.Command != "" && !r.Elevated && !ck.done() {
		ck.script(r.Command, 0, r.Shell == "sh")
	}
	if r.Elevated && !ck.done() {
		ck.add(Decision{Effect: c.elevation, Rule: RuleElevation + " " + string(c.elevation), Reason: "elevated commands run outside the command rules", Subject: r.Command})
	}
	return Explanation{Decision: ck.decision(), Checks: ck.checks}
}

func (c *compiled) checkTool(r *Request) Decision {
	if r.Action != "" {
		key := r.Tool + "." + r.Action
		if e, ok := c.tools[key]; ok {
			return Decision{Effect: e, Rule: "tools." + key + " " + string(e), Reason: fmt.Sprintf("tool action %q is set to %s", key, e), Subject: key}
		}
	}
	if e, ok := c.tools[r.Tool]; ok {
		return Decision{Effect: e, Rule: "tools." + r.Tool + " " + string(e), Reason: fmt.Sprintf("tool %q is set to %s", r.Tool, e), Subject: r.Tool}
	}
	if e, ok := c.groups[r.Group]; ok {
		return Decision{Effect: e, Rule: "groups." + r.Group + " " + string(e), Reason: fmt.Sprintf("tool group %q is set to %s", r.Group, e), Subject: r.Tool}
	}
	return Decision{Effect: Deny, Rule: RuleDefault, Reason: fmt.Sprintf("tool group %q is not granted", r.Group), Subject: r.Tool}
}

// checker collects the checks of one request.
type checker struct {
	c          *compiled
	env        env
	checks     []Decision
	stopAtDeny bool
	denied     bool
	posix      bool              // the script being checked is read by a POSIX sh
	seen       map[Decision]bool // checks made already (the second reading of a script repeats most)
	// maybe counts the readings of text that may run but need not (see
	// checker.maybe) the checker is inside.
	maybeDepth int
	maybeRuns  int  // readings made, against maxMaybe
	vars       vars // static values the text assigns, for speculate
	// flow is the working directory at each statement of the script being
	// checked (see cwd.go); env.cwd is the one of the command being checked.
	flow map[*syntax.Stmt]dirs
	// cdpath is set when the text sets CDPATH, cdable when it runs shopt
	// (cdable_vars): a relative cd may then go elsewhere.
	cdpath, cdable bool
	rulePats       map[int][]pathPat // path rules as patterns, for meetsRule
}

// maxMaybe caps the readings of text that may run in one request: each can
// hold more (eval "$x" where x holds eval "$x" ...), so without a cap the
// work would grow exponentially with the text.
const maxMaybe = 512

// maybe runs check on text that the command may run, read approximately:
// the words xargs reads from `echo ...`, quoted text bash may evaluate
// later. Only the deny rules apply there; nothing else it finds (a command
// no rule matches, a parse error) counts, since the text may be just text.
// Past maxMaybe readings the request gets the dynamicCommand effect
// instead: what else it may run is not read.
func (ck *checker) maybe(check func()) {
	if ck.maybeRuns >= maxMaybe {
		depth := ck.maybeDepth
		ck.maybeDepth = 0
		ck.dynamic("", fmt.Sprintf("more than %d pieces of text that may run: the rest is not read", maxMaybe))
		ck.maybeDepth = depth
		return
	}
	ck.maybeRuns++
	ck.maybeDepth++
	defer func() { ck.maybeDepth-- }()
	check()
}

func (ck *checker) add(d Decision) {
	if ck.maybeDepth > 0 {
		if d.Effect != Deny || !isRuleLabel(d.Rule) {
			return
		}
		d.Reason += " (in text the shell may run)"
	}
	if ck.seen[d] {
		return
	}
	if ck.seen == nil {
		ck.seen = map[Decision]bool{}
	}
	ck.seen[d] = true
	ck.checks = append(ck.checks, d)
	if d.Effect.Severity() == Deny.Severity() {
		ck.denied = true
	}
}

// isRuleLabel reports whether a check was made by a rule of the policy
// (a command or path rule, or the fork bomb check) rather than a default.
func isRuleLabel(label string) bool {
	return strings.HasPrefix(label, "commands[") || strings.HasPrefix(label, "paths[") || strings.HasPrefix(label, RuleForkBomb)
}

// done reports whether further checks cannot change the decision: the first
// deny decides, so Check may stop there.
func (ck *checker) done() bool { return ck.stopAtDeny && ck.denied }

func (ck *checker) decision() Decision {
	best := -1
	for i, d := range ck.checks {
		if best < 0 || d.Effect.Severity() > ck.checks[best].Effect.Severity() {
			best = i
		}
	}
	d := ck.checks[best]
	if !d.Effect.Valid() {
		d.Effect = Deny
	}
	return d
}

var errNotResolved = errors.New("paths must be absolute and resolved")

func validatePath(p string) (string, error) {
	if p == "" || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", errNotResolved
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", errNotResolved
	}
	return path.Clean(p), nil
}

func (ck *checker) checkPath(p string, a Access) {
	clean, err := validatePath(p)
	if err != nil {
		ck.add(Decision{Effect: Deny, Rule: RuleInvalidPath, Reason: err.Error(), Subject: p})
		return
	}
	if a != Read && a != Write {
		ck.add(Decision{Effect: Deny, Rule: RuleInvalidPath, Reason: fmt.Sprintf("access %q is neither read nor write", a), Subject: p})
		return
	}
	matched := false
	for i := range ck.c.paths {
		r := &ck.c.paths[i]
		if (r.Access == "" || r.Access == a) && r.matches(clean, ck.env) {
			matched = true
			ck.add(Decision{Effect: r.Effect, Rule: r.label, Reason: r.Reason, Subject: clean})
		}
	}
	if !matched {
		ck.add(Decision{Effect: Allow, Rule: RuleNoPathRule, Reason: "no path rule matches " + string(a), Subject: clean})
	}
}
