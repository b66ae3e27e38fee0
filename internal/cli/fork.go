package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

func (a *App) forkCommand() *cobra.Command {
	var count int
	var labelArgs []string
	cmd := &cobra.Command{
		Use:   "fork SRC NEW",
		Short: "Fork a neuron: new neurons with its files as they are now",
		Long: `fork makes NEW, a running neuron with SRC's files as they are at one
instant: a running SRC is paused for the copy and resumed after it, so
the copy is consistent and SRC runs on. With --count N it makes N forks,
NEW-1 ... NEW-N, from the same instant. In the microVM modes (qemu,
firecracker) a fork comes from a whole-machine snapshot: it runs on with SRC's memory and processes, with
a channel secret, clock and RNG of its own. The copy shares data with SRC
where the filesystem can (reflinks on btrfs or XFS); on ext4 the files
are copied.

A fork takes SRC's policy (network, limits, image) and labels (--label
replaces them) and remembers SRC: status shows "forked from". Afterwards
it is an ordinary neuron: exec, snapshot, destroy, fork again. NEW must
have no data yet. It prints each fork's id.`,
		Example:           "  nsys-cortex fork agent try\n  nsys-cortex fork agent try --count 4 --label experiment=1",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgsUpTo(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dsts, err := sandbox.ForkIDs(args[1], count)
			if err != nil {
				return fmt.Errorf("--count: %w", err)
			}
			var opts sandbox.ForkOptions
			if len(labelArgs) > 0 {
				if opts.Labels, err = labels.ParseSet(labelArgs); err != nil {
					return fmt.Errorf("--label: %w", err)
				}
			}
			made, err := a.fork(cmd.Context(), args[0], args[1], count, dsts, opts)
			for _, st := range made {
				fmt.Fprintln(a.Stdout, st.ID)
			}
			return err
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "make this many forks, NEW-1 ... NEW-N (at most 100)")
	cmd.Flags().StringArrayVar(&labelArgs, "label", nil, "the forks' labels KEY=VALUE instead of SRC's (repeatable)")
	return cmd
}

// fork forks neuron ref through the daemon when there is one, else here
// through the gate.
func (a *App) fork(ctx context.Context, ref, id string, count int, dsts []string, opts sandbox.ForkOptions) ([]*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		n, _, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return nil, err
		}
		got, err := n.Fork(ctx, &cortex.NeuronForkRequest{ID: id, Count: count, Labels: opts.Labels})
		var out []*sandbox.State
		for i := range got {
			out = append(out, stateOf(&got[i]))
		}
		return out, err
	}
	f, st, err := localCapability[sandbox.Forker](ctx, a, ref, "fork", gate.Fork)
	if err != nil {
		return nil, err
	}
	return f.Fork(ctx, st.ID, dsts, opts)
}
