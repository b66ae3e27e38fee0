package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPresets(t *testing.T) {
	t.Parallel()
	if got := PresetNames(); !slices.Equal(got, []string{"readonly", "standard", "trusted"}) {
		t.Fatalf("PresetNames() = %v", got)
	}
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			// Preset validates every rule and runs its examples.
			p := mustPreset(t, name)
			if p.Name != name {
				t.Errorf("Name = %q", p.Name)
			}
			if p.Resources != DefaultResources() {
				t.Errorf("Resources = %+v, want %+v", p.Resources, DefaultResources())
			}
			for i, r := range p.Commands {
				if r.Reason == "" || r.Examples == nil || len(r.Examples.Match) == 0 {
					t.Errorf("commands[%d] %q lacks a reason or a match example", i, r.Match)
				}
			}
			for i, r := range p.Paths {
				if r.Reason == "" || r.Examples == nil || len(r.Examples.Match) == 0 {
					t.Errorf("paths[%d] %q lacks a reason or a match example", i, r.Pattern)
				}
			}
			// Round trip: what a preset marshals to parses back the same.
			data, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			q := mustParse(t, string(data))
			q.compiled, p.compiled = nil, nil
			a, _ := json.Marshal(p)
			b, _ := json.Marshal(q)
			if string(a) != string(b) {
				t.Errorf("round trip differs:\n%s\n%s", a, b)
			}
		})
	}
	if _, err := Preset("paranoid"); err == nil || !strings.Contains(err.Error(), "readonly, standard, trusted") {
		t.Fatalf("unknown preset error %v does not list the presets", err)
	}
	a, b := mustPreset(t, "standard"), mustPreset(t, "standard")
	a.Groups["exec"] = Deny
	if b.Groups["exec"] != Allow {
		t.Fatal("Preset returns shared maps")
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src, want string
	}{
		{"unknown field", `{"groups": {}, "colour": "red"}`, `unknown field "colour"`},
		{"unknown rule field", `{"commands": [{"match": "ls", "effect": "allow", "why": "x"}]}`, `unknown field "why"`},
		{"trailing data", `{} {}`, "trailing data"},
		{"bad group effect", `{"groups": {"exec": "yes"}}`, `groups.exec: invalid effect "yes"`},
		{"bad commandDefault", `{"commandDefault": "maybe"}`, `commandDefault: invalid effect`},
		{"bad command effect", `{"commands": [{"match": "ls", "effect": "allow"}, {"match": "rm", "effect": "nope"}]}`, `commands[1].effect: invalid effect "nope"`},
		{"empty match", `{"commands": [{"match": " ", "effect": "deny"}]}`, `commands[0].match: empty match`},
		{"two commands", `{"commands": [{"match": "ls; rm", "effect": "deny"}]}`, `commands[0].match: "ls; rm" must be one simple command`},
		{"pipeline", `{"commands": [{"match": "curl x | sh", "effect": "deny"}]}`, `commands[0].match`},
		{"unparsable match", `{"commands": [{"match": "echo 'x", "effect": "deny"}]}`, `commands[0].match: "echo 'x" does not parse`},
		{"bad command glob", `{"commands": [{"match": "rm [", "effect": "deny"}]}`, `commands[0].match: word 1 "[" is a bad glob`},
		{"flag first", `{"commands": [{"match": "-rf", "effect": "deny"}]}`, `first word must name a command`},
		{"failing match example", `{"commands": [{"match": "git push", "effect": "ask", "examples": {"match": ["git push", "git pull"]}}]}`, `commands[0].examples.match[1]: "git pull" does not match "git push"`},
		{"failing noMatch example", `{"commands": [{"match": "git", "effect": "ask", "examples": {"noMatch": ["git status"]}}]}`, `commands[0].examples.noMatch[0]: "git status" matches "git"`},
		{"bad path glob", `{"paths": [{"pattern": "/etc/[", "effect": "deny"}]}`, `paths[0].pattern: "/etc/[" is a bad glob`},
		{"relative path pattern", `{"paths": [{"pattern": "etc/*", "effect": "deny"}]}`, `paths[0].pattern: "etc/*" must be absolute`},
		{"bad access", `{"paths": [{"pattern": "/etc/**", "access": "exec", "effect": "deny"}]}`, `paths[0].access: invalid access "exec"`},
		{"bad path effect", `{"paths": [{"pattern": "/x", "effect": "allow"}, {"pattern": "/y", "effect": ""}]}`, `paths[1].effect`},
		{"failing path example", `{"paths": [{"pattern": "~/.ssh/**", "effect": "deny", "examples": {"match": ["/root/.ssh/id_rsa"]}}]}`, `paths[0].examples.match[0]: "/root/.ssh/id_rsa" does not match "~/.ssh/**"`},
		{"bad duration", `{"resources": {"maxTimeout": "ten"}}`, `invalid duration`},
		{"timeout order", `{"resources": {"defaultTimeout": "700s"}}`, `resources.defaultTimeout: 11m40s exceeds maxTimeout 10m0s`},
		{"unknown extends", `{"extends": "lax"}`, `extends: policy: unknown preset "lax"`},
		{"extends rule index is the file's", `{"extends": "standard", "commands": [{"match": "ls", "effect": "bad"}]}`, `commands[0].effect`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error %v, want it to contain %q", err, tt.want)
			}
			if !IsInvalid(err) {
				t.Fatalf("IsInvalid(%v) = false", err)
			}
		})
	}
}

func TestExtends(t *testing.T) {
	t.Parallel()
	std := mustPreset(t, "standard")
	p := mustParse(t, `{
		"extends": "standard",
		"name": "team",
		"groups": {"mcp": "allow"},
		"commands": [{"match": "terraform apply", "effect": "ask", "reason": "changes infrastructure",
			"examples": {"match": ["terraform apply -auto-approve"], "noMatch": ["terraform plan"]}}],
		"resources": {"maxTimeout": "30m"}
	}`)
	if p.Name != "team" || p.Groups["mcp"] != Allow || p.Groups["exec"] != Allow {
		t.Fatalf("merge: %+v", p)
	}
	if len(p.Commands) != len(std.Commands)+1 || len(p.Paths) != len(std.Paths) {
		t.Fatalf("rules not appended: %d commands, %d paths", len(p.Commands), len(p.Paths))
	}
	if p.Resources.MaxTimeout != Duration(30*time.Minute) || p.Resources.DefaultTimeout != Duration(120*time.Second) {
		t.Fatalf("resources: %+v", p.Resources)
	}
	want := `commands[` + itoa(len(std.Commands)) + `] ask "terraform apply"`
	if d := p.Check(bash("terraform apply")); d.Rule != want {
		t.Fatalf("got %s, want %s", d.Rule, want)
	}
	if d := p.Check(bash("rm -rf /")); d.Rule != rmRoot {
		t.Fatalf("preset rule lost: %s", d.Rule)
	}
	if d := p.Check(&Request{Tool: "x", Group: "mcp"}); d.Effect != Allow {
		t.Fatalf("group override lost: %+v", d)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "p.json")
	if err := os.WriteFile(file, []byte(`{"extends": "readonly", "commands": [{"match": "make test", "effect": "allow"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Check(bash("make test")); d.Effect != Allow {
		t.Fatalf("got %+v", d)
	}
	if d := p.Check(bash("make install")); d.Effect != Deny {
		t.Fatalf("got %+v", d)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !IsInvalid(err) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestEffect(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"allow", "ask", "deny"} {
		e, err := ParseEffect(s)
		if err != nil || e.String() != s {
			t.Errorf("ParseEffect(%q) = %v, %v", s, e, err)
		}
	}
	if _, err := ParseEffect("Allow!"); err == nil {
		t.Error("ParseEffect accepted junk")
	}
	if MaxEffect(Allow, Ask) != Ask || MaxEffect(Deny, Ask) != Deny || MaxEffect(Allow, Allow) != Allow {
		t.Error("MaxEffect order")
	}
	if Effect("junk").Severity() != Deny.Severity() {
		t.Error("an invalid effect must count as deny")
	}
	if _, err := ParseAccess("write"); err != nil {
		t.Error(err)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"2m"`), &d); err != nil || d != Duration(2*time.Minute) {
		t.Errorf("Duration: %v %v", d, err)
	}
	if b, _ := json.Marshal(Duration(90 * time.Second)); string(b) != `"1m30s"` {
		t.Errorf("Duration JSON %s", b)
	}
}

// TestDocsExample keeps the example in docs/policy.md loadable.
func TestDocsExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatalf("read docs/policy.md: %v", err)
	}
	_, rest, ok := strings.Cut(string(doc), "```json\n")
	if !ok {
		t.Fatal("docs/policy.md has no ```json block")
	}
	src, _, _ := strings.Cut(rest, "```")
	p := mustParse(t, src)
	if d := p.Check(bash("cd infra && terraform apply")); d.Effect != Ask {
		t.Fatalf("got %+v", d)
	}
}
