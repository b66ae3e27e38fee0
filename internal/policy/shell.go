package policy

import (
	"fmt"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

const (
	// maxNesting limits shell source inside shell source (bash -c, eval,
	// watch, env -S, a here-document fed to a shell).
	maxNesting = 8
	// maxWrapping limits wrappers around one command (sudo nice timeout ...).
	maxWrapping = 16
)

// stdinSource is what feeds a simple command's standard input, as far as
// pipe-to-shell and here-documents go.
type stdinSource struct {
	fromDownloader bool             // an earlier pipeline stage runs curl or wget
	heredoc        *syntax.Redirect // a here-document or here-string
	heredocSrc     string           // the source heredoc's positions point into
	piped          *string          // what the previous pipeline stage prints, when its text shows it
	// decoded marks input that is text the command line shows, through a
	// filter the engine does not follow (echo ... | base64 -d | sh).
	decoded bool
}

// script parses shell source as the shell that runs it reads it, and
// checks everything in it. The dialect matters: dash reads $'...' as "$"
// and a quoted string, so text that is one harmless word to bash holds
// other commands for sh. Source that does not parse as its shell's is
// denied (a shell runs the lines before a syntax error).
func (ck *checker) script(src string, depth int, posix bool) {
	if depth > maxNesting {
		ck.add(Decision{Effect: Deny, Rule: RuleNestingLimit, Reason: "shell source nested more than 8 levels deep (bash -c, eval, ...)", Subject: src})
		return
	}
	saved := ck.posix
	ck.posix = posix
	defer func() { ck.posix = saved }()
	f, err := parseAs(src, posix)
	if err != nil && posix && ck.maybeDepth > 0 {
		// Text that may run is read generously: sh is bash on some systems.
		f, err = parseAs(src, false)
	}
	if err != nil {
		dialect := "bash"
		if posix {
			dialect = "a POSIX sh"
		}
		ck.add(Decision{Effect: Deny, Rule: RuleParseError, Reason: "the command does not parse as " + dialect + ": " + err.Error(), Subject: src})
		return
	}
	ck.collectVars(f, src)
	savedFlow, savedDirs := ck.flow, ck.env.cwd
	ck.flow = ck.newFlow(f, src)
	ck.walk(f, src, depth)
	ck.flow, ck.env.cwd = savedFlow, savedDirs
}

// walk checks every simple command, redirection and function declaration
// anywhere under root, substitutions included.
func (ck *checker) walk(root syntax.Node, src string, depth int) {
	var fed map[*syntax.CallExpr]bool
	var seenPipes map[*syntax.BinaryCmd]bool
	var piped map[*syntax.CallExpr]pipedInput
	var seenPiped map[*syntax.BinaryCmd]bool
	var stmtOf map[*syntax.CallExpr]*syntax.Stmt
	// A simple command is checked after what is under it, in the order bash
	// runs things: substitutions in its words first.
	var stack []syntax.Node
	var cwds []dirs // the working directory around each statement
	backquotes := 0 // backquoted substitutions around the node
	syntax.Walk(root, func(n syntax.Node) bool {
		if n == nil {
			done := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if cs, ok := done.(*syntax.CmdSubst); ok && cs.Backquotes {
				backquotes--
			}
			if _, ok := done.(*syntax.Stmt); ok {
				ck.env.cwd, cwds = cwds[len(cwds)-1], cwds[:len(cwds)-1]
			}
			if call, ok := done.(*syntax.CallExpr); ok && !ck.done() {
				in := stdinSource{fromDownloader: fed[call], heredocSrc: src, piped: piped[call].text, decoded: piped[call].decoded}
				if st := stmtOf[call]; st != nil {
					in.heredoc = heredocOf(st)
				}
				ck.call(call, src, depth, in)
			}
			return true
		}
		if ck.done() {
			return false
		}
		if cs, ok := n.(*syntax.CmdSubst); ok && backquotes > 0 {
			ck.nestedBackquotes(cs, src, depth, backquotes)
			return false // its children, as the parser read them, are wrong
		}
		stack = append(stack, n)
		switch n := n.(type) {
		case *syntax.CmdSubst:
			if n.Backquotes {
				backquotes++
			}
		case *syntax.Stmt:
			cwds = append(cwds, ck.env.cwd)
			if d, ok := ck.flow[n]; ok {
				ck.env.cwd = d
			}
			if call, ok := n.Cmd.(*syntax.CallExpr); ok && len(n.Redirs) > 0 {
				if stmtOf == nil {
					stmtOf = map[*syntax.CallExpr]*syntax.Stmt{}
				}
				stmtOf[call] = n
			}
		case *syntax.BinaryCmd:
			if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && !seenPiped[n] {
				if piped == nil {
					piped, seenPiped = map[*syntax.CallExpr]pipedInput{}, map[*syntax.BinaryCmd]bool{}
				}
				markPiped(n, src, piped, seenPiped)
			}
			if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && ck.c.pipeToShell != Allow && !seenPipes[n] {
				if fed == nil {
					fed, seenPipes = map[*syntax.CallExpr]bool{}, map[*syntax.BinaryCmd]bool{}
				}
				markFed(n, src, fed, seenPipes)
			}
		case *syntax.Redirect:
			ck.redirect(n, src)
		case *syntax.FuncDecl:
			ck.funcDecl(n, src)
		case *syntax.Word:
			ck.quotedCode(n, src, depth)
		}
		ck.evalNode(n, src)
		ck.assignNode(n, src, depth)
		return true
	})
}

func (ck *checker) call(n *syntax.CallExpr, src string, depth int, in stdinSource) {
	ws := reduceWords(n.Args, src)
	if len(ws) == 0 {
		return // assignments only; their substitutions are walked
	}
	ck.simple(ws, depth, in, 0)
}

func joinVals(ws []word) string {
	vals := make([]string, len(ws))
	for i, w := range ws {
		vals[i] = w.val
	}
	return strings.Join(vals, " ")
}

func (ck *checker) dynamic(subject, why string) {
	ck.add(Decision{Effect: ck.c.dynamicCommand, Rule: RuleDynamicCommand + " " + string(ck.c.dynamicCommand), Reason: why, Subject: subject})
}

// simple checks one simple command against the rules, then whatever it
// runs if it is a wrapper.
func (ck *checker) simple(ws []word, depth int, in stdinSource, wraps int) {
	subject := joinVals(ws)
	if wraps > maxWrapping {
		ck.add(Decision{Effect: Deny, Rule: RuleNestingLimit, Reason: "more than 16 wrapper commands around one command", Subject: subject})
		return
	}
	ck.speculate(ws, depth, in, wraps)
	if ws[0].runtime() {
		ck.dynamic(subject, "the command name is only known when it runs")
		return
	}
	v := newView(ws)
	ck.rules(ws, v, subject)
	e, notPath := ck.commandEnv(ws)
	ck.operandPaths(ws[1:], e, notPath-1)
	ck.evalCall(ws)
	ck.assignWords(ws, depth)
	ck.stdin(ws, depth, in)
	ck.unwrapped(ws, v.name, depth, in, wraps, subject)
}

// rules applies the command rules to one simple command, commandDefault
// when none matches, and dynamicArgument.
func (ck *checker) rules(ws []word, v *cmdView, subject string) {
	matched := false
	var missed []*cmdRule // rules that do not match, for dynamicArgument
	for _, r := range ck.c.commands {
		if r.matches(v, ck.env) {
			matched = true
			ck.add(Decision{Effect: r.Effect, Rule: r.label, Reason: r.Reason, Subject: subject})
		} else if r.Effect != Allow {
			missed = append(missed, r)
		}
	}
	if !matched {
		e := ck.c.commandDefault
		ck.add(Decision{Effect: e, Rule: RuleCommandDefault + " " + string(e), Reason: "no command rule matches", Subject: subject})
	}
	ck.dynamicArgs(ws, v, missed, subject)
}

// stdin checks what a shell or interpreter reads as its script from stdin:
// a download (pipeToShell), a here-document, text the previous stage
// prints.
func (ck *checker) stdin(ws []word, depth int, in stdinSource) {
	if (in.fromDownloader || in.heredoc != nil) && readsScriptFromStdin(ws) {
		if in.fromDownloader && ck.c.pipeToShell != Allow {
			e := ck.c.pipeToShell
			ck.add(Decision{Effect: e, Rule: RulePipeToShell + " " + string(e), Reason: "runs a script downloaded by curl or wget without showing it", Subject: "curl/wget | " + joinVals(ws)})
		}
		if dialect, ok := stdinShell(ws); ok && in.heredoc != nil {
			ck.nested(stdinDoc(in.heredoc, in.heredocSrc), depth, dialect)
		}
	}
	if dialect, ok := stdinShell(ws); ok && in.piped != nil && in.heredoc == nil {
		ck.maybe(func() { ck.nested(word{val: *in.piped}, depth, dialect) })
	}
	if in.decoded && in.heredoc == nil && readsScriptFromStdin(ws) {
		ck.dynamic(joinVals(ws), "runs as a script text from the command line that a filter the policy does not read turned into code (echo ... | base64 -d | sh)")
	}
}

// unwrapped checks what a wrapper runs.
func (ck *checker) unwrapped(ws []word, name string, depth int, in stdinSource, wraps int, subject string) {
	innerIn := in
	if name == "xargs" {
		innerIn = stdinSource{} // xargs reads its stdin; what it runs gets /dev/null
	}
	for _, inner := range unwrap(ws, in) {
		if ck.done() {
			return
		}
		run := func() {
			if len(inner.dirs) > 0 {
				saved := ck.env.cwd
				defer func() { ck.env.cwd = saved }()
				var d dirs
				for _, w := range inner.dirs {
					d = d.union(ck.cd(w, saved))
				}
				ck.env.cwd = d
			}
			switch {
			case inner.dynamic != "":
				ck.dynamic(subject, inner.dynamic)
			case inner.script != nil:
				if len(inner.params) > 0 {
					ck.vars.addScalar("0", inner.params[0].val)
					ck.positional(inner.params[1:])
				}
				ck.nested(*inner.script, depth, inner.shell)
			default:
				ck.simple(inner.words, depth, innerIn, wraps+1)
			}
		}
		if inner.maybe {
			ck.maybe(run)
		} else {
			run()
		}
	}
}

// dynamicArgs applies dynamicArgument when a word only known at run time
// could make a rule that did not match, and is more severe than allow,
// match: readonly's "sort $X" may be "sort --output=f".
func (ck *checker) dynamicArgs(ws []word, v *cmdView, missed []*cmdRule, subject string) {
	if ck.c.dynamicArg == Allow || !slices.ContainsFunc(ws[1:], word.runtime) {
		return
	}
	for _, r := range missed {
		if !r.couldMatch(v, ck.env) {
			continue
		}
		e := ck.c.dynamicArg
		if r.Effect.Severity() < e.Severity() {
			e = r.Effect
		}
		ck.add(Decision{Effect: e, Rule: RuleDynamicArg + " " + string(e),
			Reason: fmt.Sprintf("a word only known at run time could make %s match (%s)", r.label, r.Reason), Subject: subject})
	}
}

// nestedBackquotes reads a substitution inside backquotes as bash does:
// each enclosing pair of backquotes takes one level of backslashes off
// (\\ to \, \` to `, \$ to $) before the text inside is parsed, and the
// parser takes off only one. So the text is taken from the source and
// unescaped once per level.
func (ck *checker) nestedBackquotes(cs *syntax.CmdSubst, src string, depth, levels int) {
	start, end := int(cs.Left.Offset())+1, int(cs.Right.Offset())
	if !cs.Backquotes {
		start++ // after "$("
	} else {
		levels++
	}
	if start > end || end > len(src) {
		ck.dynamic(nodeSource(cs, src), "a substitution nested in backquotes that cannot be read")
		return
	}
	text := src[start:end]
	if cs.Backquotes {
		text = strings.TrimRight(text, `\`) // the backslashes of the closing quote
	}
	for range levels {
		text = unbackquote(text)
	}
	ck.script(text, depth+1, ck.posix)
}

// unbackquote removes one level of backquote escapes.
func unbackquote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\`$", s[i+1]) >= 0 {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nested checks shell source that a command runs (bash -c STR, eval ...)
// as shell reads it ("": the current shell, for eval).
func (ck *checker) nested(s word, depth int, shell string) {
	posix := ck.posix
	if shell != "" {
		posix = shell == "sh"
	}
	if s.dyn {
		ck.dynamic(s.val, "runs shell source only known when it runs")
		ck.speculateScript(s, depth, posix)
		return
	}
	ck.script(s.val, depth+1, posix)
}

func heredocOf(st *syntax.Stmt) *syntax.Redirect {
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			if r.Hdoc != nil {
				return r
			}
		case syntax.WordHdoc:
			return r
		}
	}
	return nil
}

// stdinDoc is the text a here-document or here-string feeds: a here-string
// is a word like any other (<<< \r\m is "rm"), with a newline after it.
func stdinDoc(r *syntax.Redirect, src string) word {
	if r.Op == syntax.WordHdoc {
		w := reduceWord(r.Word, src)
		w.val += "\n"
		return w
	}
	return reduceHeredoc(r.Hdoc, src)
}

// reduceHeredoc reads a here-document body, where backslash escapes work
// as inside double quotes.
func reduceHeredoc(w *syntax.Word, src string) word {
	out := word{}
	var b strings.Builder
	for _, s := range segments(w.Parts, src, true, nil) {
		b.WriteString(s.s)
		out.dyn = out.dyn || s.dyn
	}
	out.val = b.String()
	return out
}

// markFed marks the simple commands of a pipeline that read the output of
// an earlier stage running curl or wget.
// The inner pipes of a|b|c go in seen so the pipeline is examined once,
// from its top.
func markFed(b *syntax.BinaryCmd, src string, fed map[*syntax.CallExpr]bool, seen map[*syntax.BinaryCmd]bool) {
	stages := append(pipelineStages(b.X, seen), pipelineStages(b.Y, seen)...)
	downloaded := false
	for _, st := range stages {
		if call, ok := st.Cmd.(*syntax.CallExpr); ok && downloaded {
			fed[call] = true
		}
		downloaded = downloaded || runsDownloader(st, src)
	}
}

// markPiped records, for each simple command of a pipeline after the
// first stage, what the stage before it prints when its text shows it,
// through the filters transformOf follows; or, when text the command
// line shows went through a filter it does not follow, that it is such
// decoded text.
func markPiped(b *syntax.BinaryCmd, src string, piped map[*syntax.CallExpr]pipedInput, seen map[*syntax.BinaryCmd]bool) {
	stages := append(pipelineStages(b.X, seen), pipelineStages(b.Y, seen)...)
	var prev *string
	shown := false // some earlier stage prints text the command line shows
	for k, st := range stages {
		call, isCall := st.Cmd.(*syntax.CallExpr)
		if isCall && k > 0 {
			piped[call] = pipedInput{text: prev, decoded: prev == nil && shown}
		}
		if k == len(stages)-1 {
			break // what the last stage prints feeds nothing
		}
		var out *string
		if o, ok := staticOutput(st, src); ok {
			out = &o
		} else if prev != nil {
			if f := transformOf(st, src); f != nil {
				if o, ok := f(*prev); ok {
					out = &o
				}
			}
		}
		shown = shown || out != nil
		prev = out
	}
}

// pipedInput is what markPiped knows of a command's input.
type pipedInput struct {
	text    *string
	decoded bool
}

func pipelineStages(st *syntax.Stmt, seen map[*syntax.BinaryCmd]bool) []*syntax.Stmt {
	if b, ok := st.Cmd.(*syntax.BinaryCmd); ok && (b.Op == syntax.Pipe || b.Op == syntax.PipeAll) {
		seen[b] = true
		return append(pipelineStages(b.X, seen), pipelineStages(b.Y, seen)...)
	}
	return []*syntax.Stmt{st}
}

func runsDownloader(st *syntax.Stmt, src string) bool {
	found := false
	syntax.Walk(st, func(n syntax.Node) bool {
		if call, ok := n.(*syntax.CallExpr); ok {
			for _, w := range call.Args {
				v := w.Lit()
				if v == "" {
					v = reduceWord(w, src).val
				}
				switch baseName(v) {
				case "curl", "wget":
					found = true
				}
			}
		}
		return !found
	})
	return found
}

var outputRedirects = map[syntax.RedirOperator]bool{
	syntax.RdrOut: true, syntax.AppOut: true, syntax.RdrInOut: true, syntax.RdrClob: true,
	syntax.AppClob: true, syntax.RdrAll: true, syntax.RdrAllClob: true, syntax.AppAll: true,
	syntax.AppAllClob: true, syntax.DplOut: true,
}

// redirect checks a redirection target: against the path rules when it is a
// static absolute path, and against writeRedirects when it writes.
func (ck *checker) redirect(r *syntax.Redirect, src string) {
	if r.Word == nil || r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc || r.Op == syntax.WordHdoc {
		return
	}
	t := reduceWord(r.Word, src)
	if (r.Op == syntax.DplOut || r.Op == syntax.DplIn) && isFD(t.val) {
		return // duplicates a file descriptor
	}
	write := outputRedirects[r.Op]
	a := Read
	if write {
		a = Write
	}
	text, param := wordText(t)
	for _, c := range ck.env.wordPaths(text, param, 0) {
		ck.candidatePath(c, a, t.val, true)
	}
	if !write || ck.c.writeRedirects == Allow || (!t.dyn && harmlessTarget(t.val)) {
		return
	}
	e := ck.c.writeRedirects
	ck.add(Decision{Effect: e, Rule: RuleWriteRedirects + " " + string(e), Reason: "output redirection writes a file", Subject: t.val})
}

func isFD(s string) bool {
	if s == "-" {
		return true
	}
	s = strings.TrimSuffix(s, "-") // >&2- moves the descriptor
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func harmlessTarget(s string) bool {
	switch s {
	case "/dev/null", "/dev/stdout", "/dev/stderr":
		return true
	}
	return strings.HasPrefix(s, "/dev/fd/") && isFD(strings.TrimPrefix(s, "/dev/fd/"))
}

// funcDecl flags fork bombs: a function named ":" (the classic
// `:(){ :|:& };:`) or one that runs itself in the background or a pipeline.
func (ck *checker) funcDecl(fd *syntax.FuncDecl, src string) {
	if ck.c.forkBomb == Allow || fd.Name == nil {
		return
	}
	name := fd.Name.Value
	if name != ":" && !spawnsItself(fd.Body, name, src) {
		return
	}
	e := ck.c.forkBomb
	ck.add(Decision{Effect: e, Rule: RuleForkBomb + " " + string(e), Reason: "a function that spawns copies of itself exhausts the process table", Subject: nodeSource(fd, src)})
}

func spawnsItself(body *syntax.Stmt, name, src string) bool {
	calls := func(st *syntax.Stmt) bool {
		call, ok := st.Cmd.(*syntax.CallExpr)
		return ok && len(call.Args) > 0 && reduceWord(call.Args[0], src).val == name
	}
	found := false
	syntax.Walk(body, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			found = found || n.Background && calls(n)
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				found = found || calls(n.X) || calls(n.Y)
			}
		}
		return !found
	})
	return found
}
