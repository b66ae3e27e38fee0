package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file reads what a command is fed when the text shows it: the output
// of `echo` and `printf` with static words, and here-documents. xargs turns
// that text into the words of the command it runs, and a shell runs it as a
// script, so `echo rm -rf / | xargs env` runs rm. What is read here is
// approximate (echo -e, printf formats), so the commands found in it are
// checked against the deny rules only (see checker.maybe).

// maxFedItems caps the words read from fed text, and maxFedCommands the
// commands xargs -I builds from it.
const (
	maxFedItems    = 64
	maxFedCommands = 8
	maxOutputLen   = 1 << 14
)

// text returns the static text that feeds a command's stdin, if known.
func (in stdinSource) text() (string, bool) {
	if in.heredoc != nil {
		return stdinDoc(in.heredoc, in.heredocSrc).val, true
	}
	if in.piped != nil {
		return *in.piped, true
	}
	return "", false
}

// staticOutput returns what a statement prints when its text shows it:
// echo and printf, a filter (cat, base64 -d, ...: see transformOf) fed a
// here-document, and lists, blocks, subshells and pipelines of those.
// Expansions stay as their placeholders ("$HOME").
func staticOutput(st *syntax.Stmt, src string) (string, bool) {
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		ws := reduceWords(c.Args, src)
		if len(ws) == 0 || ws[0].runtime() {
			return "", false
		}
		switch baseName(ws[0].val) {
		case "echo":
			return echoOutput(ws[1:]), true
		case "printf":
			return printfOutput(ws[1:])
		}
		if h := heredocOf(st); h != nil {
			if f := transformOf(st, src); f != nil {
				return f(stdinDoc(h, src).val)
			}
		}
	case *syntax.Block:
		return stmtsOutput(c.Stmts, src)
	case *syntax.Subshell:
		return stmtsOutput(c.Stmts, src)
	case *syntax.BinaryCmd:
		switch c.Op {
		case syntax.AndStmt, syntax.OrStmt:
			return stmtsOutput([]*syntax.Stmt{c.X, c.Y}, src)
		case syntax.Pipe, syntax.PipeAll:
			if out, ok := staticOutput(c.Y, src); ok {
				return out, true
			}
			if f := transformOf(c.Y, src); f != nil {
				if in, ok := staticOutput(c.X, src); ok {
					return f(in)
				}
			}
		}
	}
	return "", false
}

func stmtsOutput(sts []*syntax.Stmt, src string) (string, bool) {
	var b strings.Builder
	any := false
	for _, st := range sts {
		if out, ok := staticOutput(st, src); ok {
			b.WriteString(out)
			any = true
		}
		if b.Len() > maxOutputLen {
			break
		}
	}
	return b.String(), any
}

// echoOutput is what bash's echo prints: -n, -e and -E are options as long
// as they lead.
func echoOutput(args []word) string {
	newline, escapes := true, false
	for len(args) > 0 {
		a := args[0].val
		if len(a) < 2 || a[0] != '-' || strings.Trim(a[1:], "neE") != "" {
			break
		}
		newline = newline && !strings.Contains(a, "n")
		if i := strings.LastIndexAny(a, "eE"); i > 0 {
			escapes = a[i] == 'e'
		}
		args = args[1:]
	}
	s := joinVals(args)
	if escapes {
		s = ansiC(s)
	}
	if newline {
		s += "\n"
	}
	return s
}

// printfOutput is what printf FORMAT ARGS... prints, for the conversions
// that copy an argument (%s, %b, %q, %d, ...); the format is reused while
// arguments remain, as printf does. printf -v prints nothing.
func printfOutput(args []word) (string, bool) {
	if len(args) > 0 && args[0].val == "--" {
		args = args[1:]
	}
	if len(args) == 0 || strings.HasPrefix(args[0].val, "-v") {
		return "", false
	}
	format, rest := args[0].val, args[1:]
	var b strings.Builder
	for pass := 0; pass < maxFedItems && b.Len() < maxOutputLen; pass++ {
		used := false
		for i := 0; i < len(format); i++ {
			if format[i] != '%' {
				j := strings.IndexByte(format[i:], '%')
				if j < 0 {
					j = len(format) - i
				}
				b.WriteString(ansiC(format[i : i+j]))
				i += j - 1
				continue
			}
			j := i + 1
			for j < len(format) && strings.IndexByte("-+ #0123456789.*", format[j]) >= 0 {
				j++
			}
			if j == len(format) {
				break
			}
			switch conv := format[j]; {
			case conv == '%':
				b.WriteByte('%')
			case len(rest) > 0:
				v := rest[0].val
				if conv == 'b' {
					v = ansiC(v)
				}
				b.WriteString(v)
				rest, used = rest[1:], true
			}
			i = j
		}
		if !used || len(rest) == 0 {
			break
		}
	}
	return b.String(), true
}

// xargsItems splits xargs input into the items it appends to its command:
// with -0 or -d at that delimiter, with -I at newlines, otherwise at blanks
// and newlines, with quotes and backslashes as xargs reads them.
func xargsItems(text string, got []option, lines bool) []string {
	delim := ""
	if hasOption(got, "-0", "--null") != nil {
		delim = "\x00"
	} else if d := hasOption(got, "-d", "--delimiter"); d != nil && d.val != nil && ansiC(d.val.val) != "" {
		delim = ansiC(d.val.val)[:1]
	} else if lines {
		delim = "\n"
	}
	var items []string
	if delim != "" {
		for _, it := range strings.Split(text, delim) {
			if lines && delim == "\n" {
				it = strings.TrimLeft(it, " \t")
			}
			if it != "" {
				items = append(items, it)
			}
		}
	} else {
		items = splitBlanks(text)
	}
	if len(items) > maxFedItems {
		items = items[:maxFedItems]
	}
	return items
}

// splitBlanks splits text at blanks and newlines, honouring '...', "..."
// and backslashes as xargs does.
func splitBlanks(text string) []string {
	var items []string
	var b strings.Builder
	inItem := false
	var quote byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				b.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inItem = c, true
		case c == '\\' && i+1 < len(text):
			i++
			b.WriteByte(text[i])
			inItem = true
		case c == ' ' || c == '\t' || c == '\n':
			if inItem {
				items = append(items, b.String())
				b.Reset()
				inItem = false
			}
		default:
			b.WriteByte(c)
			inItem = true
		}
	}
	if inItem {
		items = append(items, b.String())
	}
	return items
}

// xargsInput is the placeholder for the words xargs reads at run time.
var xargsInput = word{val: "{xargs input}", dyn: true, split: true}

// unwrapXargs returns the command xargs runs: its command words with the
// words it reads appended, or put where -I's replace string stands. Those
// words are only known at run time, so a wrapper or shell as xargs's
// command runs an unknown command (`xargs env`, `xargs sh`). When the input
// is in the text (echo ... | xargs), the commands it makes are returned as
// well, for the deny rules.
func unwrapXargs(args []word, in stdinSource) []inner {
	rest, got := parseOptions(args, xargsOpts)
	if len(rest) > 0 && rest[0].runtime() {
		return commandOf(rest)
	}
	cmd := rest
	if len(cmd) == 0 {
		cmd = []word{{val: "echo", prefix: "echo"}} // what xargs runs by default
	}
	replace := ""
	if o := hasOption(got, "-I", "-i", "--replace"); o != nil {
		replace = "{}"
		if o.val != nil && o.val.val != "" {
			replace = o.val.val
		}
	}
	var words []word
	if replace == "" {
		words = append(append(words, cmd...), xargsInput)
	} else {
		for _, w := range cmd {
			if !w.runtime() && strings.Contains(w.val, replace) {
				before, _, _ := strings.Cut(w.val, replace)
				w = word{val: strings.ReplaceAll(w.val, replace, xargsInput.val), dyn: true, prefix: before}
			}
			words = append(words, w)
		}
	}
	out := []inner{{words: words}}
	text, ok := in.text()
	if f := hasOption(got, "-a", "--arg-file"); f != nil {
		text, ok = "", false
		if f.val != nil && f.val.out != nil {
			text, ok = *f.val.out, true
		}
	}
	if !ok {
		return out
	}
	items := xargsItems(text, got, replace != "")
	if replace == "" {
		c := append([]word(nil), cmd...)
		for _, it := range items {
			c = append(c, word{val: it, prefix: it})
		}
		return append(out, inner{words: c, maybe: true})
	}
	for i, it := range items {
		if i == maxFedCommands {
			break
		}
		c := make([]word, len(cmd))
		for j, w := range cmd {
			v := strings.ReplaceAll(w.val, replace, it)
			c[j] = word{val: v, prefix: v, dyn: w.dyn}
		}
		out = append(out, inner{words: c, maybe: true})
	}
	return out
}
