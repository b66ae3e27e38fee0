package labels

import (
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

func TestValidateKey(t *testing.T) {
	good := []string{"team", "a", "run-42", "a.b_c", "example.com/owner", "x.y-z.io/Name_1", strings.Repeat("k", 63),
		strings.Repeat("p", 63) + "." + strings.Repeat("q", 63) + "/n"}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	bad := map[string]string{
		"":                              "empty",
		"-team":                         "beginning and ending",
		"team-":                         "beginning and ending",
		"te am":                         "letters, digits",
		"a/b/c":                         "more than one",
		"/name":                         "prefix before '/' is empty",
		"Example.com/x":                 "DNS subdomain",
		"ex_ample.com/x":                "DNS subdomain",
		"-ex.com/x":                     "DNS subdomain",
		"ex.com/":                       "letters, digits",
		strings.Repeat("k", 64):         "at most 63",
		"team=a":                        "letters, digits",
		strings.Repeat("p", 254) + "/n": "DNS subdomain",
	}
	for k, want := range bad {
		err := ValidateKey(k)
		if err == nil || !strings.Contains(err.Error(), want) || !errdefs.IsInvalid(err) {
			t.Errorf("ValidateKey(%q) = %v, want an invalid error saying %q", k, err, want)
		}
	}
}

func TestValidateValue(t *testing.T) {
	for _, v := range []string{"", "a", "42", "A-b_c.d", strings.Repeat("v", 63)} {
		if err := ValidateValue(v); err != nil {
			t.Errorf("ValidateValue(%q) = %v", v, err)
		}
	}
	for _, v := range []string{"-a", "a-", "a b", "a/b", "é", strings.Repeat("v", 64), "a,b"} {
		if err := ValidateValue(v); err == nil || !errdefs.IsInvalid(err) {
			t.Errorf("ValidateValue(%q) = %v, want invalid", v, err)
		}
	}
}

func TestParseChange(t *testing.T) {
	c, err := ParseChange([]string{"team=a", "run=", "old-", "example.com/x-"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Set.String() != "run=,team=a" || strings.Join(c.Remove, " ") != "old example.com/x" {
		t.Errorf("ParseChange = %v %v", c.Set, c.Remove)
	}
	// A value ending in '-' is a value, not a removal.
	if c, err := ParseChange([]string{"k=a-"}); err == nil {
		t.Errorf("k=a- was taken as %v: a value may not end in '-'", c)
	}
	for args, want := range map[string]string{
		"team":                         "key=value",
		"-=a":                          "beginning and ending",
		"k=a,k=b":                      "given twice",
		"k=a,k-":                       "both set and removed",
		"k=a b":                        "label value",
		"bad key=v":                    "letters, digits",
		"k=" + strings.Repeat("v", 64): "at most 63",
	} {
		_, err := ParseChange(strings.Split(args, ","))
		if err == nil || !strings.Contains(err.Error(), want) || !errdefs.IsInvalid(err) {
			t.Errorf("ParseChange(%q) = %v, want an invalid error saying %q", args, err, want)
		}
	}
	if _, err := ParseSet([]string{"k-"}); err == nil {
		t.Error("ParseSet took a removal")
	}
}

func TestApply(t *testing.T) {
	s := Set{"team": "a", "run": "1"}
	out, err := s.Apply(Change{Set: Set{"run": "2", "env": "ci"}, Remove: []string{"team", "absent"}})
	if err != nil || out.String() != "env=ci,run=2" {
		t.Fatalf("Apply = %v, %v", out, err)
	}
	if s.String() != "run=1,team=a" {
		t.Errorf("Apply changed its receiver: %v", s)
	}
	big := Set{}
	for i := range MaxLabels {
		big[strings.Repeat("k", i+1)] = "v"
	}
	if _, err := big.Apply(Change{Set: Set{"one-more": "v"}}); err == nil {
		t.Errorf("a set of %d labels was accepted", MaxLabels+1)
	}
	if out, _ := (Set{"a": "1"}).Apply(Change{Remove: []string{"a"}}); out != nil {
		t.Errorf("an emptied set is %#v, want nil", out)
	}
}

func TestSelector(t *testing.T) {
	sets := map[string]Set{
		"a":    {"team": "a", "run": "42"},
		"b":    {"team": "b", "run": "7", "env": "ci"},
		"c":    {"team": "a", "env": "dev"},
		"none": nil,
	}
	for _, tc := range []struct {
		sel, want, canon string
	}{
		{"", "a b c none", ""},
		{"team=a", "a c", "team=a"},
		{"team==a", "a c", "team=a"},
		{" team = a , run != 42 ", "c", "run!=42,team=a"},
		{"team=a,run!=42", "c", "run!=42,team=a"},
		{"run!=42", "b c none", "run!=42"},
		{"env in (ci,dev)", "b c", "env in (ci,dev)"},
		{"env in (dev, ci, dev)", "b c", "env in (ci,dev)"},
		{"env notin (ci)", "a c none", "env notin (ci)"},
		{"env", "b c", "env"},
		{"!env", "a none", "!env"},
		{"! env,team", "a", "!env,team"},
		{"team=a,env", "c", "env,team=a"},
		{"run=", "", "run="},
		{"env in (a,)", "", "env in (,a)"},
		{"example.com/x=1", "", "example.com/x=1"},
	} {
		sel, err := Parse(tc.sel)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.sel, err)
			continue
		}
		var got []string
		for _, name := range []string{"a", "b", "c", "none"} {
			if sel.Matches(sets[name]) {
				got = append(got, name)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%q selects %v, want %q", tc.sel, got, tc.want)
		}
		if sel.String() != tc.canon {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.sel, sel.String(), tc.canon)
		}
		if again, err := Parse(sel.String()); err != nil || again.String() != sel.String() {
			t.Errorf("the canonical form %q does not parse back: %v, %v", sel.String(), again, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for sel, want := range map[string]string{
		"team=a,":       "expected a key at the end",
		",team":         "expected a key",
		"team=a b":      "expected ','",
		"team in a":     "expected '('",
		"team in (a":    "expected ',' or ')'",
		"team in ()":    "empty",
		"team notin ()": "empty",
		"team isnt a":   "expected =, ==, !=, in or notin",
		"team>1":        "not supported",
		"-team=a":       "beginning and ending",
		"team=-a":       "label value",
		"!":             "expected a key after '!'",
		"team=a)":       "expected ','",
		"(team)":        "expected a key",
		"team=a,,run=1": "expected a key",
		"team in (a b)": "expected ',' or ')'",
	} {
		_, err := Parse(sel)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "label selector") || !errdefs.IsInvalid(err) {
			t.Errorf("Parse(%q) = %v, want an invalid error saying %q", sel, err, want)
		}
	}
}

func TestSelectorFromSetAndAnd(t *testing.T) {
	tenant := SelectorFromSet(Set{"team": "a", "env": "ci"})
	if tenant.String() != "env=ci,team=a" {
		t.Errorf("SelectorFromSet = %q", tenant)
	}
	both := MustParse("run!=42").And(tenant)
	if !both.Matches(Set{"team": "a", "env": "ci"}) || both.Matches(Set{"team": "a", "env": "ci", "run": "42"}) || both.Matches(Set{"team": "a"}) {
		t.Errorf("%q matches wrongly", both)
	}
	if !Everything.Empty() || !Everything.Matches(nil) {
		t.Error("Everything does not select everything")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"team=a,run!=42", "env in (a,b)", "!x,y notin (z)", "a==b", "k in (a,)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(sel.String())
		if err != nil || again.String() != sel.String() {
			t.Fatalf("%q parsed to %q, which parses to %q, %v", s, sel.String(), again.String(), err)
		}
	})
}
