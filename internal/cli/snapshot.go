//go:build !cortex_light

package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// snapshots is what the snapshot commands do to one neuron: beside it, or
// through the daemon. Either way a snapshot is shown as the API shows it
// (cortex.Snapshot), so the output is the same.
type snapshots interface {
	ID() string
	Create(ctx context.Context, name string) (*cortex.Snapshot, error)
	List(ctx context.Context) ([]cortex.Snapshot, error)
	Restore(ctx context.Context, name string) (*cortex.Snapshot, error)
	Remove(ctx context.Context, name string) error
}

var (
	_ snapshots = (*localSnapshots)(nil)
	_ snapshots = (*remoteSnapshots)(nil)
)

// localSnapshots works beside the neuron, through tools.SetNeuron.
type localSnapshots struct {
	n *tools.SetNeuron
	a *App
}

func (l *localSnapshots) ID() string { return l.n.ID() }

func (l *localSnapshots) Create(ctx context.Context, name string) (*cortex.Snapshot, error) {
	if err := l.a.authorize(ctx, gate.SnapshotCreate, l.n.ID()); err != nil {
		return nil, err
	}
	snap, err := l.n.CreateSnapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	v := api.SnapshotOf(snap)
	return &v, nil
}

func (l *localSnapshots) List(ctx context.Context) ([]cortex.Snapshot, error) {
	all, err := l.n.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cortex.Snapshot, len(all))
	for i := range all {
		out[i] = api.SnapshotOf(&all[i])
	}
	return out, nil
}

func (l *localSnapshots) Restore(ctx context.Context, name string) (*cortex.Snapshot, error) {
	if err := l.a.authorize(ctx, gate.SnapshotRestore, l.n.ID()); err != nil {
		return nil, err
	}
	snap, err := l.n.RestoreSnapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	v := api.SnapshotOf(snap)
	return &v, nil
}

func (l *localSnapshots) Remove(ctx context.Context, name string) error {
	if err := l.a.authorize(ctx, gate.SnapshotRemove, l.n.ID()); err != nil {
		return err
	}
	return l.n.RemoveSnapshot(ctx, name)
}

// remoteSnapshots goes through the daemon's snapshot routes.
type remoteSnapshots struct {
	c  *cortex.Client
	id string
}

func (r *remoteSnapshots) ID() string { return r.id }

func (r *remoteSnapshots) Create(ctx context.Context, name string) (*cortex.Snapshot, error) {
	return r.c.CreateSnapshot(ctx, r.id, name)
}

func (r *remoteSnapshots) List(ctx context.Context) ([]cortex.Snapshot, error) {
	return r.c.Snapshots(ctx, r.id)
}

func (r *remoteSnapshots) Restore(ctx context.Context, name string) (*cortex.Snapshot, error) {
	out, err := r.c.RestoreSnapshot(ctx, r.id, name)
	if err != nil {
		return nil, err
	}
	return &out.Snapshot, nil
}

func (r *remoteSnapshots) Remove(ctx context.Context, name string) error {
	return r.c.DeleteSnapshot(ctx, r.id, name)
}

func (a *App) snapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: shortSnapshot,
		Long: `snapshot saves a neuron as it is now and brings it back later, as the tool
kit's snapshot tool, the chat's checkpoints and /ctx's "snapshot NAME" do.

A neuron whose mode keeps its files as files (process, nsbox, docker) is
saved as a copy of its files; a restore stops it, puts every file back and
starts it again (its processes end). A microVM neuron (qemu, firecracker)
is saved whole, memory, processes and disk; a restore brings all of it
back, and the processes that ran then go on from there. A snapshot of one
kind is never restored into a neuron of the other.

Snapshots are kept in <home>/snapshots/<neuron>/<name>/ on the host that
runs the neuron. They outlive the neuron, a destroy --wipe too: list and
rm still take the snapshots of a neuron that is gone, by its full id. With --api (or NSYS_CORTEX_API_URL) the daemon takes and
restores them there; the output is the same either way.`,
	}
	cmd.AddCommand(a.snapshotCreateCommand(), a.snapshotListCommand(), a.snapshotRestoreCommand(), a.snapshotRemoveCommand())
	return cmd
}

// snapshotNeuron resolves ref to the neuron to snapshot, through the
// daemon when the CLI is pointed at one; exact asks for its full id
// (commands that lose data). left also takes the snapshots of a neuron
// that is gone (destroyed with its data), by its full id: listing and
// removing them needs no neuron.
func (a *App) snapshotNeuron(ctx context.Context, ref string, exact, left bool) (snapshots, error) {
	if c, err := a.apiClient(); err != nil {
		return nil, err
	} else if c != nil {
		st, err := remoteFind(ctx, c, ref, !exact)
		if left && errdefs.IsNotFound(err) {
			return &remoteSnapshots{c: c, id: ref}, nil // the daemon finds what is left, or says not found
		}
		if err != nil {
			return nil, err
		}
		return &remoteSnapshots{c: c, id: st.ID}, nil
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, err
	}
	find := set.Find
	if exact {
		find = set.FindExact
	}
	_, st, err := find(ctx, ref)
	if err != nil {
		if n := tools.LeftSnapshots(set, a.lay, ref); left && errdefs.IsNotFound(err) && n != nil {
			return &localSnapshots{n: n, a: a}, nil
		}
		return nil, err
	}
	return &localSnapshots{n: tools.NewSetNeuron(set, a.lay, st.ID), a: a}, nil
}

func (a *App) snapshotCreateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "create NEURON NAME",
		Short: "Save a neuron as snapshot NAME (its files; a VM whole)",
		Long: `create saves the neuron as snapshot NAME (1-64 letters, digits, '.', '_', '-')
and prints NAME. Its files are copied while it runs (after a sync); a
microVM neuron is paused for the moment its memory and disk are saved,
and must be running.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := store.CheckSnapshotName(args[1]); err != nil {
				return err
			}
			n, err := a.snapshotNeuron(ctx, args[0], false, false)
			if err != nil {
				return err
			}
			snap, err := n.Create(ctx, args[1])
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, snap.Name)
			if snap.Kind == "vm" {
				fmt.Fprintf(a.Stderr, "snapshot %s of %s: the whole VM (memory, processes and disk), %s on disk\n", snap.Name, n.ID(), sizeText(snap.Bytes))
			} else {
				fmt.Fprintf(a.Stderr, "snapshot %s of %s: %d files, %s\n", snap.Name, n.ID(), snap.Files, sizeText(snap.Bytes))
			}
			return nil
		},
	}
}

// snapshotListing is how snapshot list shows a neuron's snapshots.
var snapshotListing = listing[cortex.Snapshot]{
	header: []string{"NAME", "KIND", "CREATED", "FILES", "SIZE"},
	row: func(v cortex.Snapshot) []string {
		files := fmt.Sprint(v.Files)
		if v.Kind == "vm" {
			files = "-"
		}
		return []string{v.Name, v.Kind, ago(v.Created), files, sizeText(v.Bytes)}
	},
	name: func(v cortex.Snapshot) string { return v.Name },
}

func (a *App) snapshotListCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:               "list NEURON",
		Aliases:           []string{"ls"},
		Short:             "List a neuron's snapshots, oldest first",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := snapshotListing.mode(&out)
			if err != nil {
				return err
			}
			n, err := a.snapshotNeuron(cmd.Context(), args[0], false, true)
			if err != nil {
				return err
			}
			views, err := n.List(cmd.Context())
			if err != nil {
				return err
			}
			return snapshotListing.print(&out, a.Stdout, mode, views)
		},
	}
	snapshotListing.addFlags(&out, cmd, "{{.Name}} {{.Kind}}")
	return cmd
}

func (a *App) snapshotRestoreCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "restore NEURON NAME",
		Short: "Bring a neuron back as snapshot NAME left it",
		Long: `restore brings the neuron back as snapshot NAME left it and prints NAME.
From a copy of files, the neuron is stopped (its processes end), every file
put back exactly, and the neuron started again. A microVM neuron is brought
back whole: files, memory, and the processes that ran at the snapshot,
which go on from there. Processes and changes since are gone. NEURON is
the full id (no prefix: a restore loses what changed since).`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := a.snapshotNeuron(cmd.Context(), args[0], true, false)
			if err != nil {
				return err
			}
			snap, err := n.Restore(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, snap.Name)
			if snap.Kind == "vm" {
				fmt.Fprintf(a.Stderr, "restored %s to snapshot %s: its files, memory and processes are as they were then\n", n.ID(), snap.Name)
			} else {
				fmt.Fprintf(a.Stderr, "restored %s to snapshot %s (%d files); it was restarted: processes that ran have ended\n", n.ID(), snap.Name, snap.Files)
			}
			return nil
		},
	}
}

func (a *App) snapshotRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "rm NEURON NAME...",
		Aliases:           []string{"remove"},
		Short:             "Delete snapshots of a neuron",
		Long:              `rm deletes the named snapshots of the neuron for good and prints each name. NEURON is the full id.`,
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := a.snapshotNeuron(cmd.Context(), args[0], true, true)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args[1:] {
				if err := n.Remove(cmd.Context(), name); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(a.Stdout, name)
			}
			return errors.Join(errs...)
		},
	}
}
