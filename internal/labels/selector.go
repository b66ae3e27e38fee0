package labels

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Op is how a requirement compares a label.
type Op uint8

// The operators of kubectl's selector syntax.
const (
	Exists    Op = iota // key
	NotExists           // !key
	Equals              // key=value, key==value
	NotEquals           // key!=value (also true when the key is missing)
	In                  // key in (a,b)
	NotIn               // key notin (a,b) (also true when the key is missing)
)

// Requirement is one comma-separated part of a selector.
type Requirement struct {
	Key    string
	Op     Op
	Values []string // sorted; one for Equals and NotEquals
}

// Matches reports whether a set meets r.
func (r Requirement) Matches(s Set) bool {
	v, ok := s[r.Key]
	switch r.Op {
	case Exists:
		return ok
	case NotExists:
		return !ok
	case Equals, In:
		return ok && slices.Contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !slices.Contains(r.Values, v)
	}
	return false
}

func (r Requirement) String() string {
	switch r.Op {
	case Exists:
		return r.Key
	case NotExists:
		return "!" + r.Key
	case Equals:
		return r.Key + "=" + r.Values[0]
	case NotEquals:
		return r.Key + "!=" + r.Values[0]
	case In:
		return r.Key + " in (" + strings.Join(r.Values, ",") + ")"
	default:
		return r.Key + " notin (" + strings.Join(r.Values, ",") + ")"
	}
}

// Selector picks sets that meet all of its requirements. The zero
// Selector selects everything.
type Selector struct {
	reqs []Requirement
}

// Everything is the selector that matches every set.
var Everything = Selector{}

// Empty reports whether sel selects everything.
func (sel Selector) Empty() bool { return len(sel.reqs) == 0 }

// Requirements returns sel's parts in canonical order.
func (sel Selector) Requirements() []Requirement { return slices.Clone(sel.reqs) }

// Matches reports whether s meets every requirement.
func (sel Selector) Matches(s Set) bool {
	for _, r := range sel.reqs {
		if !r.Matches(s) {
			return false
		}
	}
	return true
}

// String is sel in canonical form: requirements sorted by key, values
// sorted; Parse(sel.String()) selects the same sets.
func (sel Selector) String() string {
	parts := make([]string, len(sel.reqs))
	for i, r := range sel.reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// SelectorFromSet returns the selector of exactly these key=value pairs.
func SelectorFromSet(s Set) Selector {
	var sel Selector
	for k, v := range s {
		sel.reqs = append(sel.reqs, Requirement{Key: k, Op: Equals, Values: []string{v}})
	}
	sel.sort()
	return sel
}

// And returns a selector that needs both sel's and other's requirements.
func (sel Selector) And(other Selector) Selector {
	out := Selector{reqs: append(slices.Clone(sel.reqs), other.reqs...)}
	out.sort()
	return out
}

func (sel *Selector) sort() {
	slices.SortStableFunc(sel.reqs, func(a, b Requirement) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return int(a.Op) - int(b.Op)
	})
}

// Parse reads a selector in kubectl's syntax: comma-separated
// requirements, each one of
//
//	key            the label is there
//	!key           the label is not there
//	key=value      (or key==value) the label has this value
//	key!=value     the label is missing or has another value
//	key in (a,b)   the label has one of these values
//	key notin (a,b) the label is missing or has none of them
//
// Spaces around the parts are allowed. An empty string selects
// everything. A selector that does not parse is an Invalid error that
// quotes it and says where it went wrong.
func Parse(s string) (Selector, error) {
	p := parser{src: s}
	var sel Selector
	if strings.TrimSpace(s) == "" {
		return sel, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return Selector{}, errdefs.Errorf(errdefs.Invalid, "label selector %q: %v", s, err)
		}
		sel.reqs = append(sel.reqs, r)
		p.space()
		if p.eof() {
			break
		}
		if !p.take(",") {
			return Selector{}, errdefs.Errorf(errdefs.Invalid, "label selector %q: expected ',' at %s", s, p.where())
		}
	}
	sel.sort()
	return sel, nil
}

// MustParse is Parse for selectors written in code; it panics on an error.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

type parser struct {
	src string
	pos int
}

func (p *parser) eof() bool { return p.pos >= len(p.src) }

func (p *parser) space() {
	for !p.eof() && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) take(tok string) bool {
	if strings.HasPrefix(p.src[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *parser) where() string {
	if p.eof() {
		return "the end"
	}
	return fmt.Sprintf("%q (character %d)", p.src[p.pos:], p.pos+1)
}

// word reads a run of characters that may be in a key or value.
func (p *parser) word() string {
	start := p.pos
	for !p.eof() && !strings.ContainsRune(" \t,()!=<>", rune(p.src[p.pos])) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *parser) requirement() (Requirement, error) {
	p.space()
	if p.take("!") {
		p.space()
		k := p.word()
		if k == "" {
			return Requirement{}, fmt.Errorf("expected a key after '!' at %s", p.where())
		}
		if err := ValidateKey(k); err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: k, Op: NotExists}, nil
	}
	k := p.word()
	if k == "" {
		return Requirement{}, fmt.Errorf("expected a key at %s", p.where())
	}
	if err := ValidateKey(k); err != nil {
		return Requirement{}, err
	}
	p.space()
	r := Requirement{Key: k}
	switch {
	case p.eof() || p.src[p.pos] == ',':
		r.Op = Exists
		return r, nil
	case p.take("=="), p.take("="):
		r.Op = Equals
	case p.take("!="):
		r.Op = NotEquals
	case p.take(">"), p.take("<"):
		return Requirement{}, fmt.Errorf("%s: the operators > and < are not supported", k)
	default:
		save := p.pos
		switch op := p.word(); op {
		case "in":
			r.Op = In
		case "notin":
			r.Op = NotIn
		default:
			p.pos = save
			return Requirement{}, fmt.Errorf("expected =, ==, !=, in or notin after %s at %s", k, p.where())
		}
		vals, err := p.values()
		if err != nil {
			return Requirement{}, err
		}
		r.Values = vals
		return r, nil
	}
	p.space()
	v := p.word()
	if err := ValidateValue(v); err != nil {
		return Requirement{}, err
	}
	r.Values = []string{v}
	return r, nil
}

// values reads "(a, b, c)".
func (p *parser) values() ([]string, error) {
	p.space()
	if !p.take("(") {
		return nil, fmt.Errorf("expected '(' at %s", p.where())
	}
	var vals []string
	for {
		p.space()
		v := p.word()
		if err := ValidateValue(v); err != nil {
			return nil, err
		}
		p.space()
		// "()" is no value at all; "(a,)" has the empty value, as in
		// kubectl.
		if v != "" || len(vals) > 0 || p.eof() || p.src[p.pos] != ')' {
			vals = append(vals, v)
		}
		if p.take(")") {
			break
		}
		if !p.take(",") {
			return nil, fmt.Errorf("expected ',' or ')' at %s", p.where())
		}
	}
	if len(vals) == 0 {
		return nil, fmt.Errorf("the set of values in () is empty")
	}
	slices.Sort(vals)
	return slices.Compact(vals), nil
}
