package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/treediff"
)

func (a *App) diffCommand() *cobra.Command {
	var patch bool
	var o outputFlags
	cmd := &cobra.Command{
		Use:   "diff A [B | B@SNAPSHOT | @SNAPSHOT]",
		Short: "What changed in a neuron: against another, a snapshot, or its fork parent",
		Long: `diff lists the paths that differ from a base to neuron A: another neuron
of its mode (B), a snapshot (B@SNAPSHOT, or @SNAPSHOT for one of A's own),
or, with no B, the neuron A was forked from. Each line is a kind — A
added, D removed, M modified (contents, size, kind or link), m mode only —
and the path as the neuron sees it. --patch adds unified diffs of text
files. It compares the layers each neuron wrote over its image, not two
whole trees (docs/diff.md); microVM modes cannot (their files are inside
a disk image).`,
		Example:           "  nsys-cortex fork agent try && ... && nsys-cortex diff try --patch\n  nsys-cortex diff agent @before\n  nsys-cortex diff agent other -o json",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.neuronArgsUpTo(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := o.mode("json", "yaml")
			if err != nil {
				return err
			}
			against := ""
			if len(args) == 2 {
				against = args[1]
			}
			opts, err := sandbox.ParseDiffAgainst(against)
			if err != nil {
				return err
			}
			opts.Patch = patch
			d, err := a.diff(cmd.Context(), args[0], against, opts)
			if err != nil {
				return err
			}
			if done, err := o.emit(a.Stdout, mode, d, []any{d}); done || err != nil {
				return err
			}
			for _, c := range d.Changes {
				fmt.Fprintln(a.Stdout, changeLine(c))
				if c.Patch != "" {
					fmt.Fprint(a.Stdout, c.Patch)
				}
			}
			if d.Truncated {
				fmt.Fprintf(a.Stderr, "nsys-cortex: more changes than the %d listed\n", treediff.DefaultMax)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&patch, "patch", false, "add unified diffs of text files")
	o.add(cmd, "json|yaml", "{{len .Changes}}")
	return cmd
}

// changeLine is one change as diff prints it.
func changeLine(c treediff.Change) string {
	letter := map[string]string{treediff.Added: "A", treediff.Removed: "D", treediff.Modified: "M", treediff.Mode: "m"}[c.Kind]
	var what []string
	switch {
	case c.Kind == treediff.Mode:
		what = append(what, c.OldMode+" -> "+c.Mode)
	case c.Type == "file" && c.Kind == treediff.Modified:
		what = append(what, fmt.Sprintf("%d -> %d bytes", c.OldSize, c.Size))
	case c.Type == "file" && c.Kind == treediff.Added:
		what = append(what, fmt.Sprintf("%d bytes", c.Size))
	case c.Type == "symlink" && c.Kind != treediff.Removed:
		what = append(what, "-> "+c.Link)
	case c.Type != "file" && c.Type != "dir":
		what = append(what, c.Type)
	}
	if c.Kind == treediff.Modified && c.Mode != c.OldMode {
		what = append(what, c.OldMode+" -> "+c.Mode)
	}
	line := letter + "  " + c.Path
	if len(what) > 0 {
		line += "  (" + strings.Join(what, ", ") + ")"
	}
	return line
}

// diff compares neuron ref with a base, through the daemon when there is
// one, else here through the gate.
func (a *App) diff(ctx context.Context, ref, against string, opts sandbox.DiffOptions) (*sandbox.Diff, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		n, _, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return nil, err
		}
		got, err := n.Diff(ctx, against, opts.Patch)
		if err != nil {
			return nil, err
		}
		d := &sandbox.Diff{Neuron: got.Neuron, Against: got.Against, Truncated: got.Truncated, Changes: make([]treediff.Change, len(got.Changes))}
		for i, c := range got.Changes {
			d.Changes[i] = treediff.Change(c)
		}
		return d, nil
	}
	d, st, err := localCapability[sandbox.Differ](ctx, a, ref, "diff", gate.FileRead)
	if err != nil {
		return nil, err
	}
	return d.Diff(ctx, st.ID, opts)
}
