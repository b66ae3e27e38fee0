package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
)

// TestSoak drives the API as 50 clients for NSYS_CORTEX_SOAK (a duration;
// unset: skipped, so not in CI by default): each in a loop, exec, a file
// written and read back, a terminal that echoes, and now and then its
// neuron destroyed and created again. It wants 0 errors, and reports the
// daemon process's RSS, open descriptors and goroutines every tenth of
// the run: the curve, which must come back to where it started.
//
//	NSYS_CORTEX_SOAK=10m go test ./internal/api -run TestSoak -v -timeout 30m
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("NSYS_CORTEX_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set NSYS_CORTEX_SOAK to a duration (e.g. 10m) to soak the API")
	}
	const clients = 50
	dm := newDaemon(t, api.Options{Token: adminToken})
	ctx := context.Background()
	for i := range clients {
		if _, err := dm.c.Create(ctx, &cortex.CreateRequest{ID: fmt.Sprintf("soak%d", i), Mode: process.Mode}); err != nil {
			t.Fatal(err)
		}
	}
	type sample struct {
		at                time.Duration
		rssKiB, fds, gors int
		ops               int64
	}
	take := func(at time.Duration, ops int64) sample {
		runtime.GC()
		return sample{at: at, rssKiB: rssKiB(), fds: openFDs(t), gors: runtime.NumGoroutine(), ops: ops}
	}
	var ops, errs atomic.Int64
	var firstErr atomic.Value
	fail := func(what string, err error) {
		if errs.Add(1) == 1 {
			firstErr.Store(fmt.Sprintf("%s: %v", what, err))
		}
	}
	start := time.Now()
	samples := []sample{take(0, 0)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("soak%d", i)
			n := dm.c.Neuron(id)
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				want := strconv.Itoa(round)
				if res, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"echo", want}}}); err != nil || strings.TrimSpace(string(res.Stdout)) != want {
					fail("exec", fmt.Errorf("%v %v", res, err))
					continue
				}
				body := bytes.Repeat([]byte(want), 1000)
				if _, err := n.WriteFile(ctx, "f", bytes.NewReader(body), nil); err != nil {
					fail("write", err)
					continue
				}
				if got, err := n.ReadFile(ctx, "f"); err != nil || !bytes.Equal(got, body) {
					fail("read", fmt.Errorf("%d bytes, %v", len(got), err))
					continue
				}
				if round%5 == 0 {
					if err := terminalEcho(ctx, n, want); err != nil {
						fail("terminal", err)
					}
				}
				if round%20 == 19 {
					if err := dm.c.Destroy(ctx, id, false); err != nil {
						fail("destroy", err)
					}
					if _, err := dm.c.Create(ctx, &cortex.CreateRequest{ID: id, Mode: process.Mode}); err != nil {
						fail("create", err)
					}
				}
				ops.Add(1)
			}
		}()
	}
	tick := time.NewTicker(d / 10) // the curve's sampling period
	for range 10 {
		<-tick.C
		samples = append(samples, take(time.Since(start), ops.Load()))
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	samples = append(samples, take(time.Since(start), ops.Load()))
	for _, s := range samples {
		t.Logf("soak t=%-8s rounds=%-7d rss=%6d KiB fds=%4d goroutines=%5d", s.at.Round(time.Second), s.ops, s.rssKiB, s.fds, s.gors)
	}
	if n := errs.Load(); n != 0 {
		t.Errorf("%d errors in %d rounds; the first: %v", n, ops.Load(), firstErr.Load())
	}
	// Flat: over the second half of the run (the first is warm-up: pools,
	// caches, the runtime's heap finding its size) nothing grows by more
	// than half again.
	warm, last := samples[5], samples[len(samples)-2]
	if last.rssKiB > warm.rssKiB*3/2 || last.fds > warm.fds+clients || last.gors > warm.gors*3/2 {
		t.Errorf("not flat: after warm-up %+v, at the end %+v", warm, last)
	}
}

// terminalEcho opens a shell on a terminal, has it echo a word, and
// closes it.
func terminalEcho(ctx context.Context, n *cortex.NeuronClient, word string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	term, err := n.Terminal(ctx, cortex.TerminalOptions{Command: cortex.Command{Argv: []string{"sh"}}, Cols: 80, Rows: 24})
	if err != nil {
		return err
	}
	defer term.Close()
	if _, err := io.WriteString(term, "echo T$((1+"+word+"))T; exit\n"); err != nil {
		return err
	}
	out, _ := io.ReadAll(term)
	w, _ := strconv.Atoi(word)
	if !strings.Contains(string(out), fmt.Sprintf("T%dT", 1+w)) {
		return fmt.Errorf("the terminal said %q", out)
	}
	return nil
}

func rssKiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}
