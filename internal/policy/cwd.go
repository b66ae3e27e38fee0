package policy

import (
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file follows the shell's working directory through the text, so
// that relative paths meet the path rules: after `cd /proc/self`,
// `cat environ` reads /proc/self/environ. It is read lexically, in the
// order bash runs things: a cd in a subshell, a pipeline stage or a
// substitution stays there; after `a || b` or an if, the directory is any
// of those the branches leave; a loop's body is read until what it leaves
// settles. A cd to a directory only known at run time (cd "$d", cd -,
// popd, a sourced file) leaves it unknown: relative paths after it are
// then anywhere, which readonly denies (dynamicArgument).

// maxDirs bounds the directories one point of the text may be in.
const maxDirs = 8

// dirs is what the working directory may be at a point of the text.
type dirs struct {
	known   []pathPat
	unknown bool // a directory only known at run time
}

func (d dirs) union(o dirs) dirs {
	if sameDirs(d.known, o.known) || len(o.known) == 0 {
		d.unknown = d.unknown || o.unknown
		return d
	}
	if len(d.known) == 0 {
		o.unknown = d.unknown || o.unknown
		return o
	}
	out := dirs{known: slices.Clone(d.known), unknown: d.unknown || o.unknown}
	keys := make([]string, len(out.known))
	for i, q := range out.known {
		keys[i] = q.key()
	}
	for _, p := range o.known {
		if k := p.key(); !slices.Contains(keys, k) {
			out.known, keys = append(out.known, p), append(keys, k)
		}
	}
	if len(out.known) > maxDirs {
		out.known, out.unknown = out.known[:maxDirs], true
	}
	return out
}

// sameDirs reports whether two lists are the same list.
func sameDirs(a, b []pathPat) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (d dirs) equal(o dirs) bool {
	return d.unknown == o.unknown && len(d.known) == len(o.known) && len(d.union(o).known) == len(d.known)
}

// startDirs is where a request's command starts: the directory it names,
// else the workspace, else a directory the request does not say, whose
// relative paths are not checked; or one only known at run time.
func startDirs(r *Request) dirs {
	if r.DirUnknown {
		return dirs{unknown: true}
	}
	for _, d := range []string{r.Dir, r.Workspace} {
		if clean, err := validatePath(d); err == nil {
			return dirs{known: []pathPat{absDir(clean)}}
		}
	}
	return dirs{known: []pathPat{{rel: true}}}
}

// flow computes the working directory at every statement of a script.
type flow struct {
	ck    *checker
	src   string
	at    map[*syntax.Stmt]dirs
	funcs map[string]*syntax.Stmt
	calls int // function bodies read, against maxMaybe
}

func (ck *checker) newFlow(f *syntax.File, src string) map[*syntax.Stmt]dirs {
	fl := &flow{ck: ck, src: src, at: map[*syntax.Stmt]dirs{}, funcs: map[string]*syntax.Stmt{}}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Assign:
			if n.Name != nil {
				ck.cdpath = ck.cdpath || n.Name.Value == "CDPATH"
				ck.env.dotglob = ck.env.dotglob || n.Name.Value == "GLOBIGNORE" // it sets dotglob
			}
		case *syntax.CallExpr:
			ws := reduceWords(n.Args[:min(len(n.Args), 2)], src)
			if len(ws) > 1 && !ws[0].runtime() && (ws[0].val == "builtin" || ws[0].val == "command") {
				ws = ws[1:]
			}
			if len(ws) > 0 && !ws[0].runtime() && ws[0].val == "shopt" {
				ck.cdable, ck.env.dotglob = true, true // cdable_vars, dotglob
			}
		case *syntax.FuncDecl:
			if n.Name != nil {
				fl.funcs[n.Name.Value] = n.Body
			}
		}
		return true
	})
	fl.stmts(f.Stmts, ck.env.cwd)
	return fl.at
}

func (fl *flow) stmts(sts []*syntax.Stmt, in dirs) dirs {
	for _, st := range sts {
		in = fl.stmt(st, in)
	}
	return in
}

func (fl *flow) stmt(st *syntax.Stmt, in dirs) dirs {
	if prev, ok := fl.at[st]; ok {
		fl.at[st] = prev.union(in)
	} else {
		fl.at[st] = in
	}
	for _, r := range st.Redirs {
		fl.substs(r, in)
	}
	out := fl.cmd(st.Cmd, in)
	if st.Background {
		return in // a background job runs in a subshell
	}
	return out
}

// substs reads the command and process substitutions under n, which run in
// subshells starting in the directory in.
func (fl *flow) substs(n syntax.Node, in dirs) {
	if n == nil {
		return
	}
	syntax.Walk(n, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			fl.stmts(n.Stmts, in)
			return false
		case *syntax.ProcSubst:
			fl.stmts(n.Stmts, in)
			return false
		}
		return true
	})
}

func (fl *flow) cmd(c syntax.Command, in dirs) dirs {
	switch c := c.(type) {
	case *syntax.CallExpr:
		fl.substs(c, in)
		return fl.call(c, in)
	case *syntax.Block:
		return fl.stmts(c.Stmts, in)
	case *syntax.Subshell:
		fl.stmts(c.Stmts, in)
		return in
	case *syntax.BinaryCmd:
		if c.Op == syntax.Pipe || c.Op == syntax.PipeAll {
			fl.stmt(c.X, in)
			last := fl.stmt(c.Y, in)
			if fl.ck.cdable { // shopt -s lastpipe runs the last stage here
				return in.union(last)
			}
			return in
		}
		x := fl.stmt(c.X, in)
		return x.union(fl.stmt(c.Y, x))
	case *syntax.IfClause:
		if !c.ThenPos.IsValid() { // else
			return fl.stmts(c.Then, in)
		}
		cond := fl.stmts(c.Cond, in)
		out := fl.stmts(c.Then, cond)
		if c.Else != nil {
			return out.union(fl.cmd(c.Else, cond))
		}
		return out.union(cond)
	case *syntax.WhileClause:
		return fl.loop(in, func(s dirs) dirs { return fl.stmts(c.Do, fl.stmts(c.Cond, s)) }, func(s dirs) dirs { return fl.stmts(c.Cond, s) })
	case *syntax.ForClause:
		fl.substs(c.Loop, in)
		body := func(s dirs) dirs { return fl.stmts(c.Do, s) }
		if n, ok := staticIterations(c, fl.src); ok {
			// for x in a b c: the body runs that many times, no more;
			// after it, the directory is any a break could leave.
			s, out := in, in
			for range n {
				s = body(s)
				out = out.union(s)
			}
			return out
		}
		return fl.loop(in, body, nil)
	case *syntax.CaseClause:
		fl.substs(c.Word, in)
		out := in
		for _, item := range c.Items {
			for _, p := range item.Patterns {
				fl.substs(p, in)
			}
			out = out.union(fl.stmts(item.Stmts, out)) // ;& and ;;& may go on to the next
		}
		return out
	case *syntax.TimeClause:
		if c.Stmt != nil {
			return fl.stmt(c.Stmt, in)
		}
	case *syntax.CoprocClause:
		fl.stmt(c.Stmt, in)
	case *syntax.FuncDecl:
		fl.stmt(c.Body, in) // its commands are read where they stand, too
	case nil:
	default: // arithmetic, tests, declarations: only their substitutions run
		fl.substs(c, in)
	}
	return in
}

// staticIterations is how many times a for loop over words the text
// names runs, when that is known and small (at most maxDirs).
func staticIterations(c *syntax.ForClause, src string) (int, bool) {
	it, ok := c.Loop.(*syntax.WordIter)
	if !ok || !it.InPos.IsValid() || len(it.Items) > maxDirs {
		return 0, false
	}
	ws := reduceWords(it.Items, src)
	for _, w := range ws {
		if w.runtime() || strings.ContainsAny(w.val, "*?[") {
			return 0, false // expanded at run time: any number
		}
	}
	return len(ws), len(ws) <= maxDirs
}

// loop reads a loop body until the directories it may leave settle; one
// that does not settle leaves them unknown.
func (fl *flow) loop(in dirs, body, cond func(dirs) dirs) dirs {
	s := in
	for range maxDirs {
		next := s.union(body(s))
		if next.equal(s) {
			if cond != nil {
				return s.union(cond(s))
			}
			return s
		}
		s = next
	}
	s.unknown = true
	return s
}

// call is where a simple command may change the directory: cd, pushd and
// popd, eval and source, and functions the script defines.
func (fl *flow) call(c *syntax.CallExpr, in dirs) dirs {
	if len(c.Args) == 0 {
		return in
	}
	if first := reduceWords(c.Args[:1], fl.src); len(first) == 1 && !first[0].runtime() && !dirCommands[first[0].val] && fl.funcs[first[0].val] == nil {
		return in // the common case, read fast
	}
	ws := reduceWords(c.Args, fl.src)
	if len(ws) == 0 {
		return in
	}
	if ws[0].runtime() {
		out := in
		out.unknown = true // $x may be cd
		return out
	}
	for len(ws) > 1 && (ws[0].val == "builtin" || ws[0].val == "command" && !ws[1].runtime() && !slices.Contains([]string{"-v", "-V"}, ws[1].val)) {
		ws = ws[1:]
		if ws[0].val == "-p" && len(ws) > 1 {
			ws = ws[1:]
		}
	}
	name, args := ws[0].val, ws[1:]
	switch name {
	case "cd", "pushd":
		for len(args) > 0 && !args[0].runtime() && len(args[0].val) > 1 && args[0].val[0] == '-' && args[0].val != "--" {
			args = args[1:] // -L, -P, -e, -@
		}
		if len(args) > 0 && args[0].val == "--" {
			args = args[1:]
		}
		switch {
		case len(args) == 0 && name == "cd":
			return dirs{known: []pathPat{fl.ck.env.homeDir()}}
		case len(args) == 0, args[0].val == "-", !args[0].runtime() && len(args[0].val) > 1 && (args[0].val[0] == '+' || args[0].val[0] == '-'):
			return dirs{known: in.known, unknown: true}
		}
		return fl.ck.cd(args[0], in)
	case "popd":
		return dirs{known: in.known, unknown: true}
	case "eval":
		if s := joinScript(args); len(s) == 1 && !s[0].script.dyn {
			if f, err := parseScript(s[0].script.val); err == nil {
				return fl.stmts(f.Stmts, in)
			}
		}
		return dirs{known: in.known, unknown: true}
	case "source", ".":
		return dirs{known: in.known, unknown: true}
	}
	if body, ok := fl.funcs[name]; ok && fl.calls < maxMaybe {
		fl.calls++
		return in.union(fl.stmt(body, in))
	}
	return in
}

// dirCommands are the commands that may change the directory, or run one
// that does.
var dirCommands = map[string]bool{"cd": true, "pushd": true, "popd": true, "eval": true, "source": true, ".": true, "builtin": true, "command": true}

// cd is where `cd target` goes from in.
func (ck *checker) cd(target word, in dirs) dirs {
	var texts []string
	param := ""
	if folded, _, ok := ck.foldTexts(target); ok {
		for _, f := range folded {
			texts = append(texts, escapeGlob(f))
		}
	} else {
		t, p := wordText(target)
		texts, param = []string{t}, p
	}
	e := ck.env
	e.cwd = in
	out := dirs{}
	for _, t := range texts {
		if param == "" && !strings.HasPrefix(t, "/") && !strings.HasPrefix(t, "~") && !hasDotStart(t) {
			out = out.union(ck.cdPath(t, in))
		}
		cands := e.wordPaths(t, param, 0)
		if len(cands) == 0 {
			out.unknown = true // "$d"
		}
		for _, c := range cands {
			if c.anyDir {
				out.unknown = true
				continue
			}
			out = out.union(dirs{known: []pathPat{c.pat}})
		}
	}
	if len(out.known) == 0 && !out.unknown {
		out.unknown = true
	}
	return out
}

// cdPath is where a relative cd may go through CDPATH, which the text
// sets, or shopt's cdable_vars.
func (ck *checker) cdPath(t string, in dirs) dirs {
	var out dirs
	if ck.cdable {
		out.unknown = true
	}
	if !ck.cdpath {
		return out
	}
	values := ck.vars.scalars["CDPATH"]
	if len(values) == 0 {
		out.unknown = true // set to what the text does not show
	}
	e := ck.env
	e.cwd = in
	for _, v := range values {
		for _, dir := range strings.Split(v, ":") {
			if dir == "" || dir[0] != '/' {
				continue // the working directory, or relative to it: read already
			}
			for _, c := range e.wordPaths(escapeGlob(dir)+"/"+t, "", 0) {
				out = out.union(dirs{known: []pathPat{c.pat}})
			}
		}
	}
	return out
}

func hasDotStart(t string) bool {
	return t == "." || t == ".." || len(t) > 1 && t[0] == '.' && (t[1] == '/' || t[1] == '.' && (len(t) == 2 || t[2] == '/'))
}
