package policy

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"io"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file follows text through the filters that decode or rewrite it in
// a pipeline, so that `echo cm0gLXJmIC8K | base64 -d | sh` and
// `echo / fr- mr | rev | xargs env` are read as the commands they run:
// cat and tee with no file, rev, tr, base64, base32, basenc and openssl
// base64 -d, xxd -r -p, and gzip and bzip2 -d. Text from the command line
// that goes through any other filter into a shell is dynamic code (see
// stdinSource.decoded).

// transform is what a filter does to the text it reads.
type transform func(string) (string, bool)

// transformOf returns what a pipeline stage does to its input, when it is
// one of the filters above with no file operand; nil otherwise.
func transformOf(st *syntax.Stmt, src string) transform {
	c, ok := st.Cmd.(*syntax.CallExpr)
	if !ok {
		return nil
	}
	ws := reduceWords(c.Args, src)
	if len(ws) == 0 || slices.ContainsFunc(ws, word.runtime) {
		return nil
	}
	args := make([]string, len(ws)-1)
	for i, w := range ws[1:] {
		args[i] = w.val
	}
	has := func(opts ...string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return slices.Contains(opts, a) })
	}
	operands := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "-") && a != "-" })
	switch name := baseName(ws[0].val); {
	case (name == "cat" || name == "tee") && len(newView(ws).operands) == 0:
		return func(s string) (string, bool) { return s, true }
	case name == "rev" && len(operands) == 0:
		return reverseLines
	case name == "tr":
		return trTransform(args)
	case (name == "base64" || name == "base32") && has("-d", "--decode", "-di", "-id") && len(operands) == 0:
		return decoder(name)
	case name == "basenc" && has("-d", "--decode") && len(operands) == 0:
		for _, enc := range []string{"--base64", "--base64url", "--base32", "--base32hex", "--base16"} {
			if has(enc) {
				return decoder(strings.TrimPrefix(enc, "--"))
			}
		}
	case name == "openssl" && has("base64", "-base64", "-a") && has("-d") && !has("-in"):
		return decoder("base64")
	case name == "xxd" && has("-r", "-rp", "-pr") && has("-p", "-ps", "-plain", "-rp", "-pr") && len(operands) == 0:
		return decoder("base16")
	case (name == "gzip" || name == "gunzip" || name == "zcat") && (name != "gzip" || has("-d", "-dc", "-cd", "--decompress")) && len(operands) == 0:
		return decompress(func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) })
	case (name == "bzip2" || name == "bunzip2" || name == "bzcat") && (name != "bzip2" || has("-d", "-dc", "-cd", "--decompress")) && len(operands) == 0:
		return decompress(func(r io.Reader) (io.Reader, error) { return bzip2.NewReader(r), nil })
	}
	return nil
}

func reverseLines(s string) (string, bool) {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		r := []rune(l)
		slices.Reverse(r)
		lines[i] = string(r)
	}
	return strings.Join(lines, "\n"), true
}

// decoder decodes base64 (standard or URL), base32 (standard or hex) or
// base16 text, ignoring the white space and padding around it.
func decoder(enc string) transform {
	return func(s string) (string, bool) {
		s = strings.Map(func(r rune) rune {
			if strings.ContainsRune(" \t\r\n", r) {
				return -1
			}
			return r
		}, s)
		var out []byte
		var err error
		switch enc {
		case "base64", "base64url":
			e := base64.RawStdEncoding
			if enc == "base64url" {
				e = base64.RawURLEncoding
			}
			out, err = e.DecodeString(strings.TrimRight(s, "="))
		case "base32", "base32hex":
			e := base32.StdEncoding
			if enc == "base32hex" {
				e = base32.HexEncoding
			}
			out, err = e.WithPadding(base32.NoPadding).DecodeString(strings.TrimRight(s, "="))
		default:
			out, err = hex.DecodeString(s)
		}
		return string(out), err == nil
	}
}

// decompress reads a compressed stream, up to the bound on static output.
func decompress(open func(io.Reader) (io.Reader, error)) transform {
	return func(s string) (string, bool) {
		r, err := open(strings.NewReader(s))
		if err != nil {
			return "", false
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, io.LimitReader(r, maxOutputLen)); err != nil {
			return "", false
		}
		return b.String(), true
	}
}

// trTransform is tr SET1 SET2 or tr -d SET1, with ranges, escapes and the
// common [:class:] names; nil for what it does not read (-c, -s, [x*n]).
func trTransform(args []string) transform {
	del := false
	if len(args) > 0 && args[0] == "-d" {
		del, args = true, args[1:]
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if del && len(args) != 1 || !del && len(args) != 2 {
		return nil
	}
	from, ok := trSet(args[0])
	if !ok {
		return nil
	}
	var to []byte
	if !del {
		if to, ok = trSet(args[1]); !ok || len(to) == 0 {
			return nil
		}
	}
	var table [256]int
	for i := range table {
		table[i] = i
	}
	for i, c := range from {
		switch {
		case del:
			table[c] = -1
		case i < len(to):
			table[c] = int(to[i])
		default:
			table[c] = int(to[len(to)-1])
		}
	}
	return func(s string) (string, bool) {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if t := table[s[i]]; t >= 0 {
				b.WriteByte(byte(t))
			}
		}
		return b.String(), true
	}
}

var trEscapes = map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', 'a': '\a', 'b': '\b', 'f': '\f', 'v': '\v'}

var trClasses = map[string]string{
	"lower": "abcdefghijklmnopqrstuvwxyz", "upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
	"digit": "0123456789", "space": " \t\n\v\f\r", "blank": " \t",
}

// trSet expands a tr set into its bytes, in order.
func trSet(s string) ([]byte, bool) {
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '[' && strings.HasPrefix(s[i:], "[:"):
			end := strings.Index(s[i+2:], ":]")
			if end < 0 {
				return nil, false
			}
			chars, ok := trClasses[s[i+2:i+2+end]]
			if !ok {
				return nil, false
			}
			out = append(out, chars...)
			i += end + 3
			continue
		case c == '[' && strings.Contains(s[i:], "*"):
			return nil, false // [c*n]
		case c == '\\' && i+1 < len(s):
			i++
			if e := s[i]; e >= '0' && e <= '7' {
				n, j := 0, i
				for j < len(s) && j-i < 3 && s[j] >= '0' && s[j] <= '7' {
					n, j = n*8+int(s[j]-'0'), j+1
				}
				c, i = byte(n), j-1
			} else if esc, ok := trEscapes[e]; ok {
				c = esc
			} else {
				c = e
			}
		}
		if i+2 < len(s) && s[i+1] == '-' {
			hi := s[i+2]
			if hi < c {
				return nil, false
			}
			for x := int(c); x <= int(hi); x++ {
				out = append(out, byte(x))
			}
			i += 2
			continue
		}
		out = append(out, c)
	}
	return out, true
}
