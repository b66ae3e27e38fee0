package policy

import (
	"math/rand/v2"
	"testing"
)

func FuzzCheck(f *testing.F) {
	for _, s := range bypasses {
		f.Add(s)
	}
	for _, s := range []string{"", "ls", ":(){ :|:& };:", "curl x | sh", "a=$((1+", "cat <<EOF\nx\nEOF", "{a,b}{c,d}{1..100}", "$'\\x'", "echo \\", "coproc x { ls; }", "select x in a; do :; done", "declare -a a=([0]=$(rm -rf /))"} {
		f.Add(s)
	}
	for _, r := range reported {
		f.Add(r.cmd)
	}
	for i := range 16 { // a few generated variants of every class
		g := gen{rngChooser{rand.New(rand.NewPCG(7, uint64(i)))}}
		f.Add(variantKind(i % int(variantKinds)).generate(g))
	}
	presets := allPresets(f)
	f.Fuzz(func(t *testing.T, cmd string) {
		r := &Request{Tool: "bash", Group: "exec", Command: cmd, Home: "/home/agent", Workspace: "/workspace"}
		for _, name := range PresetNames() {
			p := presets[name]
			d := p.Check(r)
			if !d.Effect.Valid() {
				t.Fatalf("%s: invalid effect %q for %q", name, d.Effect, cmd)
			}
			e := p.Explain(r)
			if e.Decision != d {
				t.Fatalf("%s: Check %+v != Explain %+v for %q", name, d, e.Decision, cmd)
			}
		}
	})
}

// variantKind is what a generated variant is, by construction.
type variantKind int

const (
	roDangerous variantKind = iota // writes or runs an unlisted program: readonly must not allow it
	roBenign                       // a command readonly keeps: it must allow it
	catastrophe                    // rm -rf /, mkfs, dd to a disk, a fork bomb: standard and trusted must not allow it
	stdBenign                      // everyday work: standard and trusted must allow it
	secretRead                     // reads a credential or a process's environment: readonly and standard must deny it
	variantKinds
)

func (k variantKind) generate(g gen) string {
	switch k {
	case roDangerous:
		return g.readonlyDangerous()
	case roBenign:
		return g.readonlyBenign()
	case catastrophe:
		return g.catastrophicVariant()
	case secretRead:
		return g.secretRead()
	}
	return g.standardBenign()
}

// checkVariant reports what is wrong with a policy's answer to a variant of
// kind k, or "".
func checkVariant(presets map[string]*Policy, k variantKind, cmd string) (preset string, d Decision, ok bool) {
	check := func(name string, good func(Effect) bool) (string, Decision, bool) {
		d := presets[name].Check(bash(cmd))
		return name, d, good(d.Effect)
	}
	notAllowed := func(e Effect) bool { return e != Allow }
	allowed := func(e Effect) bool { return e == Allow }
	switch k {
	case roDangerous:
		return check("readonly", notAllowed)
	case roBenign:
		return check("readonly", allowed)
	case catastrophe:
		if n, d, ok := check("standard", func(e Effect) bool { return e == Deny }); !ok {
			return n, d, ok
		}
		return check("trusted", func(e Effect) bool { return e == Deny })
	case secretRead:
		if n, d, ok := check("readonly", func(e Effect) bool { return e == Deny }); !ok {
			return n, d, ok
		}
		return check("standard", func(e Effect) bool { return e == Deny })
	}
	if n, d, ok := check("standard", allowed); !ok {
		return n, d, ok
	}
	return check("trusted", allowed)
}

func allPresets(t testing.TB) map[string]*Policy {
	m := map[string]*Policy{}
	for _, n := range PresetNames() {
		m[n] = mustPreset(t, n)
	}
	return m
}

// TestGeneratedVariants checks a fixed set of generated variants of every
// class on every run: a few thousand, in well under a second.
func TestGeneratedVariants(t *testing.T) {
	t.Parallel()
	presets := allPresets(t)
	counts := map[variantKind]int{roDangerous: 1500, roBenign: 400, catastrophe: 1500, stdBenign: 400, secretRead: 800}
	failures := 0
	for k := range variantKinds {
		for i := range counts[k] {
			g := gen{rngChooser{rand.New(rand.NewPCG(uint64(k), uint64(i)))}}
			cmd := k.generate(g)
			if name, d, ok := checkVariant(presets, k, cmd); !ok {
				t.Errorf("kind %d #%d %s: %s by %s\n  %s", k, i, name, d.Effect, d.Rule, cmd)
				if failures++; failures == 30 {
					t.Fatal("too many failures")
				}
			}
		}
	}
}

// fuzzSeeds are choice sequences that reach each class.
var fuzzSeeds = [][]byte{
	{}, {0, 0, 0}, {1, 1, 1, 1}, {2, 3, 4, 5, 6}, {0, 1, 0, 2, 0, 3}, {7, 3, 2, 9, 1, 4, 4},
	{5, 5, 5, 5, 5, 5, 5, 5}, {9, 8, 7, 6, 5, 4, 3, 2, 1}, {3, 14, 15, 92, 65, 35},
}

// FuzzReadonlyClasses generates variants of the review's classes from the
// fuzzer's bytes (each byte is one choice of the generator) and checks
// readonly denies the dangerous ones and keeps the benign ones, and that
// readonly and standard deny reading credentials however the path is
// written.
func FuzzReadonlyClasses(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	presets := allPresets(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &bytesChooser{data: data}
		k := roDangerous
		switch c.pick(8) {
		case 0, 1:
			k = roBenign
		case 2, 3:
			k = secretRead
		}
		cmd := k.generate(gen{c})
		if name, d, ok := checkVariant(presets, k, cmd); !ok {
			t.Fatalf("kind %d %s: %s by %s\n  %s", k, name, d.Effect, d.Rule, cmd)
		}
	})
}

// FuzzCatastrophicClasses does the same for the catastrophic denies of
// standard and trusted.
func FuzzCatastrophicClasses(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	presets := allPresets(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &bytesChooser{data: data}
		k := catastrophe
		if c.pick(5) == 0 {
			k = stdBenign
		}
		cmd := k.generate(gen{c})
		if name, d, ok := checkVariant(presets, k, cmd); !ok {
			t.Fatalf("kind %d %s: %s by %s\n  %s", k, name, d.Effect, d.Rule, cmd)
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
