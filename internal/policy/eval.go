package policy

import (
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file finds the places where bash evaluates text it reads at run
// time, which the parser cannot see: arithmetic reads a variable's value as
// an expression, and an array subscript in it (a[$(cmd)]) runs command
// substitutions. So do test -v, printf -v, read and the other builtins
// that take a variable name, declare -i and -n, ${!x} and ${x@P}. With
// x='a[$(touch f)]', `echo $((x))` runs touch. They get the runtimeEval
// effect; arithmetic on literals only ($((1+2)), ${a[0]}, ${x:1:2}) is fine.

// Reasons given for runtimeEval.
const (
	whyArith     = "bash evaluates the values of variables in arithmetic, and runs the $(...) of an array subscript in them"
	whySubscript = "bash evaluates an array subscript in a variable name given as text, running the $(...) in it"
	whyIndirect  = "${!x} reads the variable whose name x holds, evaluating a subscript in it"
	whyPrompt    = "${x@P} expands x as a prompt, running the $(...) in its value"
	whyDecl      = "declare -i makes assignments arithmetic, -n makes a name refer to another variable"
)

var numberRE = lazyRE(`^([0-9]+|0[xX][0-9a-fA-F]+|[0-9]+#[0-9a-zA-Z@_]+)$`)

// evalText records the runtimeEval effect.
func (ck *checker) evalText(subject, why string) {
	e := ck.c.runtimeEval
	if e == Allow {
		return
	}
	ck.add(Decision{Effect: e, Rule: RuleRuntimeEval + " " + string(e), Reason: why, Subject: subject})
}

// evalNode checks one node of the syntax tree for run-time evaluation.
func (ck *checker) evalNode(n syntax.Node, src string) {
	if ck.c.runtimeEval == Allow {
		return
	}
	arith := func(x syntax.ArithmExpr) {
		if x != nil && !arithLiteral(x) {
			ck.evalText(nodeSource(x, src), whyArith)
		}
	}
	switch n := n.(type) {
	case *syntax.ArithmExp:
		arith(n.X)
	case *syntax.ArithmCmd:
		arith(n.X)
	case *syntax.LetClause:
		for _, x := range n.Exprs {
			arith(x)
		}
	case *syntax.CStyleLoop:
		arith(n.Init)
		arith(n.Cond)
		arith(n.Post)
	case *syntax.Assign:
		arith(n.Index)
	case *syntax.ArrayElem:
		arith(n.Index)
	case *syntax.ParamExp:
		switch {
		case n.Excl && n.Names == 0 && (n.Index == nil || !allElements(n.Index)):
			ck.evalText(nodeSource(n, src), whyIndirect)
		case n.Exp != nil && n.Exp.Op == syntax.OtherParamOps && n.Exp.Word != nil && n.Exp.Word.Lit() == "P":
			ck.evalText(nodeSource(n, src), whyPrompt)
		}
		if !allElements(n.Index) {
			arith(n.Index)
		}
		if n.Slice != nil {
			arith(n.Slice.Offset)
			arith(n.Slice.Length)
		}
	case *syntax.TestClause:
		if why := testClauseEvaluates(n.X, src); why != "" {
			ck.evalText(nodeSource(n, src), why)
		}
	case *syntax.DeclClause:
		ck.declClause(n, src)
	}
}

// allElements reports whether an index is [@] or [*] (all elements, not an
// expression), or absent.
func allElements(x syntax.ArithmExpr) bool {
	if x == nil {
		return true
	}
	w, ok := x.(*syntax.Word)
	return ok && (w.Lit() == "@" || w.Lit() == "*")
}

// arithLiteral reports whether an arithmetic expression has only numbers
// (and $#, $?, $$, $!, ${#x}): nothing in it is read as an expression.
func arithLiteral(x syntax.ArithmExpr) bool {
	switch x := x.(type) {
	case *syntax.BinaryArithm:
		return arithLiteral(x.X) && arithLiteral(x.Y)
	case *syntax.UnaryArithm:
		return arithLiteral(x.X)
	case *syntax.ParenArithm:
		return arithLiteral(x.X)
	case *syntax.Word:
		if len(x.Parts) != 1 {
			return false
		}
		switch p := x.Parts[0].(type) {
		case *syntax.Lit:
			return numberRE().MatchString(p.Value)
		case *syntax.ParamExp:
			if p.Length {
				return true // a length; its subscript is checked where it stands
			}
			return p.Short && p.Param != nil && strings.Contains("#?$!", p.Param.Value) && len(p.Param.Value) == 1
		}
	}
	return false
}

// testClauseEvaluates says why a [[ ]] expression evaluates text: an
// arithmetic comparison (-eq, -lt, ...) of anything but numbers, or -v of
// anything but a plain name.
func testClauseEvaluates(x syntax.TestExpr, src string) string {
	switch x := x.(type) {
	case *syntax.BinaryTest:
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, y := range []syntax.TestExpr{x.X, x.Y} {
				if w, ok := y.(*syntax.Word); !ok || !numberRE().MatchString(w.Lit()) {
					return whyArith
				}
			}
			return ""
		}
		if why := testClauseEvaluates(x.X, src); why != "" {
			return why
		}
		return testClauseEvaluates(x.Y, src)
	case *syntax.UnaryTest:
		if x.Op == syntax.TsVarSet {
			if w, ok := x.X.(*syntax.Word); !ok || !isName(w.Lit()) {
				return whySubscript
			}
			return ""
		}
		return testClauseEvaluates(x.X, src)
	case *syntax.ParenTest:
		return testClauseEvaluates(x.X, src)
	}
	return ""
}

// declClause checks declare, local, typeset, export, readonly, nameref:
// -i, -n and -I (which inherits them) make later assignments evaluate; a
// name given as text (quoted or only known at run time) may carry a
// subscript, or be an option.
func (ck *checker) declClause(d *syntax.DeclClause, src string) {
	subject := nodeSource(d, src)
	if d.Variant.Value == "nameref" {
		ck.evalText(subject, whyDecl)
		return
	}
	for _, a := range d.Args {
		if !a.Naked || a.Name != nil || a.Value == nil {
			continue
		}
		w := reduceWord(a.Value, src)
		if why := declWord(w); why != "" {
			ck.evalText(subject, why)
			return
		}
	}
}

// declWord says why one word of a declaration evaluates text.
func declWord(w word) string {
	switch {
	case w.runtime():
		return whySubscript
	case len(w.val) > 1 && (w.val[0] == '-' || w.val[0] == '+'):
		if strings.ContainsAny(w.val[1:], "inI") {
			return whyDecl
		}
	case strings.Contains(w.val, "["):
		return whySubscript
	}
	return ""
}

// Builtins that take a variable name, and how they read their options.
var (
	readOpts    = newGetopt("+a:d:ei:n:N:p:rst:u:")
	waitOpts    = newGetopt("+fnp:")
	declareOpts = map[string]bool{"declare": true, "typeset": true, "local": true, "export": true, "readonly": true}
)

// evalCall checks a simple command that is a builtin evaluating text:
// test/[ -v, printf -v, read, mapfile, getopts, unset, wait -p, let, and
// declare and its kin when they come as words (command declare -i ...).
func (ck *checker) evalCall(ws []word) {
	if ck.c.runtimeEval == Allow {
		return
	}
	subject := joinVals(ws)
	name, args := baseName(ws[0].val), ws[1:]
	names := func(ns []word) bool { // variable names given as words
		return slices.ContainsFunc(ns, func(w word) bool { return w.runtime() || strings.Contains(w.val, "[") })
	}
	var why string
	switch name {
	case "test", "[":
		if name == "[" && len(args) > 0 && args[len(args)-1].val == "]" {
			args = args[:len(args)-1]
		}
		if testEvaluates(args) {
			why = whySubscript
		}
	case "printf":
		if len(args) > 0 && (args[0].runtime() || strings.HasPrefix(args[0].val, "-v")) {
			why = whySubscript
		}
	case "read":
		rest, got := parseOptions(args, readOpts)
		if a := hasOption(got, "-a"); a != nil && a.val != nil {
			rest = append(rest, *a.val)
		}
		if names(rest) {
			why = whySubscript
		}
	case "mapfile", "readarray":
		if rest, _ := parseOptions(args, mapfileOpts); names(rest) {
			why = whySubscript
		}
	case "getopts":
		if len(args) > 1 && names(args[1:2]) {
			why = whySubscript
		}
	case "unset":
		if names(args) {
			why = whySubscript
		}
	case "wait":
		if _, got := parseOptions(args, waitOpts); hasOption(got, "-p") != nil {
			if p := hasOption(got, "-p"); p.val == nil || names([]word{*p.val}) {
				why = whySubscript
			}
		}
	case "let":
		if slices.ContainsFunc(args, func(w word) bool { return w.runtime() || !numberRE().MatchString(w.val) }) {
			why = whyArith
		}
	default:
		if declareOpts[name] {
			for _, a := range args {
				if why = declWord(a); why != "" {
					break
				}
			}
		}
	}
	if why != "" {
		ck.evalText(subject, why)
	}
}

// testEvaluates reports whether test or [ with these operands may evaluate
// a subscript: -v of anything but a plain name, or a word only known at run
// time where -v could stand, by the arity rules test reads its operands
// with (a word that may split can stand anywhere).
func testEvaluates(args []word) bool {
	for i, a := range args {
		if a.multi() {
			return true
		}
		if !a.runtime() && a.val == "-v" && (i+1 == len(args) || args[i+1].runtime() || !isName(args[i+1].val)) {
			return true
		}
	}
	dyn := func(i int) bool { return args[i].runtime() }
	switch n := len(args); {
	case n == 2:
		return dyn(0)
	case n == 3:
		return dyn(1) && (dyn(0) || args[0].val == "!")
	case n >= 4:
		return slices.ContainsFunc(args, word.runtime)
	}
	return false
}
