//go:build !cortex_light

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/ctxsource"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/model"
)

// DefaultCtxDir is where mount puts /ctx.
const DefaultCtxDir = "/ctx"

// mountRecord is what a serving mount leaves in <home>/mounts, for umount.
func (a *App) mountRecordPath(dir string) string { return ctxmount.RecordPath(a.lay.MountsDir(), dir) }

func (a *App) mountCommand() *cobra.Command {
	var readOnly, debug bool
	cmd := &cobra.Command{
		Use:   "mount [DIR]",
		Short: shortMount,
		Long: `Mount serves the whole cortex as a FUSE filesystem (docs/ctx.md): every neuron,
process, terminal, receipt, session and agent as files to ls, cat, tail -f and
write verbs into:

  cat /ctx/neurons/ID/status            running mode=nsbox pid=4242 created=...
  tail -f /ctx/neurons/ID/processes/PID/stdout
  echo 'resize 120x40' > /ctx/neurons/ID/terminals/TID/ctl
  echo stop > /ctx/neurons/ID/ctl

It runs in the foreground until SIGINT or SIGTERM (or nsys-cortex umount DIR)
and then unmounts. A stale mount left by a mount that crashed is cleared
first. The operator (root and the user who mounts) sees everything; a
neuron's uid sees only its own neuron. Neurons may write ctl files only
once the mount has been validated as this CortexFS (it is, right after
mounting, unless --read-only).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := DefaultCtxDir
			if len(args) == 1 {
				dir = args[0]
			}
			return a.serveCtx(cmd.Context(), dir, readOnly, debug)
		},
	}
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "refuse every write (ctl, input), the operator's too")
	cmd.Flags().BoolVar(&debug, "debug", false, "log every FUSE request to stderr")
	return cmd
}

func (a *App) serveCtx(ctx context.Context, dir string, readOnly, debug bool) error {
	set, err := a.sandboxes()
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if !ctxfs.Stale(dir) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("mount: %w", err)
		}
	}
	m := model.New(set)
	if _, err := m.Refresh(ctx); err != nil {
		return fmt.Errorf("mount: listing the neurons: %w", err)
	}
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go m.Run(mctx)
	src := ctxsource.New(set, a.lay, m, api.NeuronOf)
	var tok [12]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	audit := launch.NewAudit(src.AuditLog())
	tree := ctxfs.NewTree(ctxfs.Options{Source: src, Channel: src, Controller: src, Meter: src, Gate: ctxsource.NewGate(a.lay, audit), Records: src,
		Auditor: audit, ReadOnly: readOnly, Token: token,
		Owner: ctxfs.Caller{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}})
	srv, err := ctxfs.Mount(dir, tree, ctxfs.MountOptions{Debug: debug})
	if err != nil {
		return err
	}
	rec := a.mountRecordPath(dir)
	if err := ctxmount.WriteRecord(a.lay.MountsDir(), ctxmount.Record{Dir: dir, PID: os.Getpid(), Since: time.Now().UTC(), Token: token}); err != nil {
		// umount falls back to the mount table, but launchers cannot
		// validate the mount without it: neurons will not get /ctx.
		fmt.Fprintf(a.Stderr, "nsys-cortex: writing the mount record: %v; neurons cannot be given this mount\n", err)
	}
	defer func() {
		// Only our own record: a later mount at dir may have replaced it.
		if r, err := ctxmount.ReadRecord(a.lay.MountsDir(), dir); err == nil && r.PID == os.Getpid() {
			os.Remove(rec)
		}
	}()
	state := "read-only"
	if !readOnly {
		// A child process reads the magic file: this process never touches
		// its own mount.
		if err := ctxmount.Validate(dir, token, ctxmount.ReadWithCat); err != nil {
			fmt.Fprintf(a.Stderr, "nsys-cortex: %v; neurons get it read-only\n", err)
			state = "read-only for neurons (not validated)"
		} else {
			tree.SetValidated(true)
			state = "validated; ctl writable"
		}
	}
	neurons := fmt.Sprintf("%d neurons", len(m.Snapshot().Neurons))
	if len(m.Snapshot().Neurons) == 1 {
		neurons = "1 neuron"
	}
	fmt.Fprintf(a.Stderr, "nsys-cortex: /ctx mounted at %s (%s; %s); stop with Ctrl-C or nsys-cortex umount %s\n",
		dir, neurons, state, dir)
	gone := make(chan struct{})
	go func() { srv.Wait(); close(gone) }()
	select {
	case <-ctx.Done():
	case <-gone:
		fmt.Fprintf(a.Stderr, "nsys-cortex: %s was unmounted\n", dir)
		return nil
	}
	unmounted := make(chan error, 1)
	go func() { unmounted <- srv.Unmount() }()
	select {
	case err := <-unmounted:
		if err != nil {
			return err
		}
	case <-time.After(3 * time.Second):
		// Neurons given /ctx (create --ctx) still hold the filesystem:
		// end the connection, so their /ctx fails (ENOTCONN) instead of
		// this process waiting for them.
		if err := srv.Abort(); err != nil {
			return fmt.Errorf("unmount: %s is still in use by neurons, and %w", dir, err)
		}
		fmt.Fprintf(a.Stderr, "nsys-cortex: %s was still in use by neurons: their /ctx is gone now\n", dir)
		<-unmounted // the lazy detach's result: the connection is over either way
	}
	<-gone
	fmt.Fprintf(a.Stderr, "nsys-cortex: unmounted %s\n", dir)
	return nil
}

func (a *App) umountCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "umount [DIR]",
		Short: shortUmount,
		Long: `Umount asks the nsys-cortex mount serving DIR to stop (it unmounts and
exits), or unmounts DIR itself when its server is gone; a busy mount is
detached lazily and disappears when its last user leaves.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.sandboxes(); err != nil {
				return err
			}
			dir := DefaultCtxDir
			if len(args) == 1 {
				dir = args[0]
			}
			dir, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			var rec ctxmount.Record
			if b, err := os.ReadFile(a.mountRecordPath(dir)); err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
				if syscall.Kill(rec.PID, syscall.SIGTERM) == nil {
					for range 100 {
						if m, ok := ctxmount.MountAt(dir); !ok || m.FSType != ctxmount.FSType {
							return nil
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}
			if err := ctxfs.Unmount(dir); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			os.Remove(a.mountRecordPath(dir))
			return nil
		},
	}
}
