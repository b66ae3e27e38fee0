package policy

import (
	"testing"
)

func FuzzCheck(f *testing.F) {
	for _, s := range bypasses {
		f.Add(s)
	}
	for _, s := range []string{"", "ls", ":(){ :|:& };:", "curl x | sh", "a=$((1+", "cat <<EOF\nx\nEOF", "{a,b}{c,d}{1..100}", "$'\\x'", "echo \\", "coproc x { ls; }", "select x in a; do :; done", "declare -a a=([0]=$(rm -rf /))"} {
		f.Add(s)
	}
	p, err := Preset("standard")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		r := &Request{Tool: "bash", Group: "exec", Command: cmd, Home: "/home/agent", Workspace: "/workspace"}
		d := p.Check(r)
		if !d.Effect.Valid() {
			t.Fatalf("invalid effect %q for %q", d.Effect, cmd)
		}
		e := p.Explain(r)
		if e.Decision != d {
			t.Fatalf("Check %+v != Explain %+v for %q", d, e.Decision, cmd)
		}
	})
}

func BenchmarkCheckBash(b *testing.B) {
	p, err := Preset("standard")
	if err != nil {
		b.Fatal(err)
	}
	r := &Request{Tool: "bash", Group: "exec", Command: `grep -rn "TODO" ./internal | sort -u | head -20`, Home: "/home/agent", Workspace: "/workspace"}
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Check(r); d.Effect != Allow {
			b.Fatalf("got %+v", d)
		}
	}
}
