package keeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

type noNeurons struct{}

func (noNeurons) List(context.Context) ([]*sandbox.State, error) { return nil, nil }
func (noNeurons) Manager(string) (sandbox.Manager, error) {
	return nil, errors.New("no modes")
}

// Ensure wakes a keeper that runs, starts one where none does, and always
// wakes first: a keeper on its way out sees the wake, or Ensure finds the
// home free and starts another.
func TestEnsure(t *testing.T) {
	lay, err := layout.New(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	start := func() error { started++; return nil }
	if err := Ensure(lay, start); err != nil || started != 1 {
		t.Fatalf("no keeper: Ensure = %v, started %d times", err, started)
	}
	if wakes(lay) != 1 {
		t.Error("Ensure did not wake before it looked")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(lay, noNeurons{}, Options{}).Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !Running(lay) {
		if time.Now().After(deadline) {
			t.Fatal("the keeper did not start")
		}
		<-time.After(5 * time.Millisecond)
	}
	before := wakes(lay)
	if err := Ensure(lay, start); err != nil || started != 1 {
		t.Fatalf("a keeper runs: Ensure = %v, started %d times", err, started)
	}
	if wakes(lay) != before+1 {
		t.Error("Ensure did not wake the keeper that runs")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A keeper with nothing to watch exits on its own, and gives the home up.
func TestKeeperExitsWhenIdle(t *testing.T) {
	lay, err := layout.New(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- New(lay, noNeurons{}, Options{ExitWhenIdle: true}).Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an idle keeper did not exit")
	}
	if Running(lay) {
		t.Fatal("the home is still held after the keeper exited")
	}
}
