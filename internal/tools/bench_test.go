package tools_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
)

// BenchmarkFile1MiB measures read and edit of a 1 MiB source file through
// the whole kit: validation, path resolution in the neuron, policy, the
// channel, and redaction of the result.
func BenchmarkFile1MiB(b *testing.B) {
	e := toolstest.New(b, "standard")
	var src strings.Builder
	for i := 0; src.Len() < 1<<20; i++ {
		fmt.Fprintf(&src, "func handler%d(w http.ResponseWriter, r *http.Request) { serve(w, r, %d) }\n", i, i)
	}
	e.Put("big.go", src.String())
	read, _ := json.Marshal(map[string]any{"path": "big.go"})
	// A first read: the file changed behind the kit (its mtime moves), so
	// the whole file crosses the channel.
	b.Run("read", func(b *testing.B) {
		b.SetBytes(1 << 20)
		t := time.Now()
		for b.Loop() {
			t = t.Add(time.Second)
			if err := os.Chtimes(e.File("big.go"), t, t); err != nil {
				b.Fatal(err)
			}
			if r := e.Kit.Call(e.Ctx, "read", read); r.IsError {
				b.Fatal(r.Text)
			}
		}
	})
	// The floor: the same bytes read and written by the channel alone.
	b.Run("channel-read+write", func(b *testing.B) {
		cl, err := tools.NewSetNeuron(e.Set, e.Layout, e.State.ID).Client(e.Ctx)
		if err != nil {
			b.Fatal(err)
		}
		p := e.File("big.go")
		b.SetBytes(1 << 20)
		for b.Loop() {
			data, err := cl.ReadFile(e.Ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			if err := cl.WriteFile(e.Ctx, p, data, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("channel-write", func(b *testing.B) {
		cl, err := tools.NewSetNeuron(e.Set, e.Layout, e.State.ID).Client(e.Ctx)
		if err != nil {
			b.Fatal(err)
		}
		data := []byte(src.String())
		b.SetBytes(1 << 20)
		for b.Loop() {
			if err := cl.WriteFile(e.Ctx, e.File("big2.go"), data, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("edit", func(b *testing.B) {
		b.SetBytes(1 << 20)
		e.Kit.Call(e.Ctx, "read", read)
		i := 0
		for b.Loop() {
			from, to := "serve(w, r, 5000)", "serve(w, r, -5000)"
			if i%2 == 1 {
				from, to = to, from
			}
			i++
			in, _ := json.Marshal(map[string]any{"path": "big.go", "old_string": from, "new_string": to})
			if r := e.Kit.Call(e.Ctx, "edit", in); r.IsError {
				b.Fatal(r.Text)
			}
		}
	})
}
