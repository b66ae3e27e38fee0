package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/transfer"
)

// parseLocation reads ID:path as a neuron path; anything else (or a path
// starting with / or .) is local.
func parseLocation(s string) transfer.Location {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return transfer.Location{Path: s}
	}
	if id, p, ok := strings.Cut(s, ":"); ok && ids.Validate(id) == nil {
		if p == "" {
			p = "."
		}
		return transfer.Location{Neuron: id, Path: p}
	}
	return transfer.Location{Path: s}
}

func (a *App) cpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between the host and neurons",
		Long: `cp copies a file or a directory tree (files, directories and symlinks;
contents and permission bits, not owners or times). A neuron path is written
ID:path: a relative path is taken from the neuron's workdir, an absolute one
is the path as the neuron sees it (in process mode it must lie inside the
workdir). Copying into an existing directory puts the source inside it;
otherwise the destination's directory must exist. "-" is stdin (as SRC) or
stdout (as DST), for a single file. An interrupted copy leaves the
destination as it was. Like cp(1), it does not wait for the disk: a copy
that must survive a power loss or a crash of the host right after it is
followed by sync (on the host, or "nsys-cortex exec ID -- sync").

The destination you name is resolved as you wrote it; everything the copy
makes below it is made without following any symlink, so a link a neuron
planted (in this copy or an earlier one into the same place) fails the copy
instead of being written through. Files never carry set-id bits out of a
neuron.

  nsys-cortex cp ./report.csv demo:            # into the neuron's workdir
  nsys-cortex cp demo:out/result.json .        # out of it
  nsys-cortex cp ./src demo:src                # a tree
  nsys-cortex cp demo:src other:src            # between neurons
  tar c . | nsys-cortex cp - demo:code.tar     # a stream`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			if src.Neuron == "" && dst.Neuron == "" {
				return errors.New("cp: neither side names a neuron (write ID:path)")
			}
			clients := map[string]channel{}
			for _, l := range []*transfer.Location{&src, &dst} {
				if l.Neuron == "" {
					continue
				}
				if c, ok := clients[l.Neuron]; ok {
					l.Client = c
					continue
				}
				action := gate.FileRead
				if l == &dst {
					action = gate.FileWrite
				}
				c, st, err := a.connect(ctx, l.Neuron, action)
				if err != nil {
					return err
				}
				l.Neuron = st.ID
				l.Client, clients[l.Neuron] = c, c
			}
			return interrupted(ctx, transfer.Copy(ctx, src, dst, transfer.Options{Stdin: a.Stdin, Stdout: a.Stdout, Stderr: a.Stderr}))
		},
	}
}
