//go:build !cortex_light

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// export and import (docs/export.md): a neuron as one archive, and back.
// The light program runs the full one for them (split.go).

func (a *App) exportCommand() *cobra.Command {
	var out string
	var snapshots bool
	cmd := &cobra.Command{
		Use:   "export ID [-o FILE|-]",
		Short: shortExport,
		Long: `export writes the neuron as one archive: its record (mode, policy, labels),
its data and, with --snapshots, its snapshots, then a manifest with a
SHA-256 of every file, which import checks before it uses anything. A
running neuron is paused for the copy and resumed after it; a paused or
stopped one is read as it is. VM disks stay sparse. -o - writes to
stdout (export ID -o - | ssh host nsys-cortex import -); the default is
ID.tar.zst here, written whole or not at all.`,
		Example:           "  nsys-cortex export web\n  nsys-cortex export web --snapshots -o /backup/web.tar.zst\n  nsys-cortex export web -o - | ssh other nsys-cortex import -",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgsUpTo(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if out == "" {
				out = args[0] + ".tar.zst"
			}
			if out == "-" {
				if f, ok := a.Stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					return fmt.Errorf("-o -: stdout is a terminal; give a file, or pipe it")
				}
				return a.export(ctx, args[0], a.Stdout, snapshots)
			}
			// Whole or not at all: written beside, renamed once complete.
			tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".partial-")
			if err != nil {
				return fmt.Errorf("-o %s: %w", out, err)
			}
			defer os.Remove(tmp.Name())
			err = a.export(ctx, args[0], tmp, snapshots)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the archive to write (- for stdout; default ID.tar.zst)")
	cmd.Flags().BoolVar(&snapshots, "snapshots", false, "put the neuron's snapshots in the archive too (a backup: import does not take them, docs/export.md)")
	return cmd
}

// export writes neuron ref's archive to w, through the daemon when there
// is one.
func (a *App) export(ctx context.Context, ref string, w io.Writer, snapshots bool) error {
	api, err := a.apiClient()
	if err != nil {
		return err
	}
	if api != nil {
		n, _, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return err
		}
		return n.Export(ctx, w, snapshots)
	}
	ex, st, err := localCapability[sandbox.Exporter](ctx, a, ref, "export", gate.Export)
	if err != nil {
		return err
	}
	_, err = ex.Export(ctx, st.ID, w, sandbox.ExportOptions{Snapshots: snapshots})
	return err
}

func (a *App) importCommand() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "import FILE|- [--id NEW]",
		Short: shortImport,
		Long: `import reads an archive that export wrote (a file, or - for stdin) and makes
its neuron, stopped, under its own id or --id NEW, in the mode it was
made in; create starts it. Every entry is checked against the archive's
manifest before anything becomes visible: a truncated or altered archive
is refused naming the first bad entry, and leaves nothing; so is one
with paths that would land outside the neuron. It prints the new id.`,
		Example: "  nsys-cortex import web.tar.zst --id web2 && nsys-cortex create web2",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var r io.Reader = a.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			st, err := a.importNeuron(ctx, r, id)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, st.ID)
			fmt.Fprintf(a.Stderr, "imported %s (mode %s, stopped): nsys-cortex create %s --mode %s starts it\n", st.ID, st.Mode, st.ID, st.Mode)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the new neuron's id (default: the archive's)")
	return cmd
}

// importNeuron reads an archive from r, through the daemon when there is
// one, else here through the gate.
func (a *App) importNeuron(ctx context.Context, r io.Reader, id string) (*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		n, err := api.Import(ctx, r, id)
		if err != nil {
			return nil, err
		}
		return stateOf(n), nil
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, err
	}
	if err := a.authorize(ctx, gate.Import, id); err != nil {
		return nil, err
	}
	return set.Import(ctx, r, id, nil)
}
