package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The lifecycle commands (docs/lifecycle.md): label, timeout, pause and
// resume, locally through the manager's capabilities or through the
// daemon's API. stats and events have files of their own.

// lifecycleFlags are create's --label, --timeout, --on-timeout and
// --auto-pause.
type lifecycleFlags struct {
	labels                   []string
	timeout, onTimeout, idle string
}

func (f *lifecycleFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "a label KEY=VALUE (repeatable; Kubernetes' rules for keys and values)")
	cmd.Flags().StringVar(&f.timeout, "timeout", "", "a deadline this long after the neuron starts, e.g. 30m (default: none)")
	cmd.Flags().StringVar(&f.onTimeout, "on-timeout", "", "what happens at the deadline: stop (the default), pause, destroy (data kept) or wipe")
	cmd.Flags().StringVar(&f.idle, "auto-pause", "", "pause the neuron once it has been idle this long, e.g. 5m (default: never)")
}

// given reports whether any of the flags was given.
func (f *lifecycleFlags) given(cmd *cobra.Command) bool {
	for _, name := range []string{"label", "timeout", "on-timeout", "auto-pause"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// apply checks the flags and sets them in opts; an error names the flag
// and what was wrong, before anything is done.
func (f *lifecycleFlags) apply(opts *sandbox.CreateOptions) error {
	var err error
	if len(f.labels) > 0 {
		if opts.Labels, err = labels.ParseSet(f.labels); err != nil {
			return fmt.Errorf("--label: %w", err)
		}
	}
	if f.timeout != "" {
		if opts.Timeout, err = parseDuration("--timeout", f.timeout); err != nil {
			return err
		}
	}
	if f.idle != "" {
		if opts.AutoPause, err = parseDuration("--auto-pause", f.idle); err != nil {
			return err
		}
	}
	if f.onTimeout != "" {
		if opts.OnTimeout, err = sandbox.ParseTimeoutAction(f.onTimeout); err != nil {
			return err
		}
		if opts.Timeout == 0 {
			return &sandbox.InvalidError{Reason: "--on-timeout " + f.onTimeout + " needs a deadline: give --timeout too"}
		}
	}
	return opts.CheckLifecycle()
}

// parseDuration reads a duration the CLI takes (30s, 10m, 1h30m; 0 is
// none), naming what it is for when it does not parse.
func parseDuration(what, s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, &sandbox.InvalidError{Reason: fmt.Sprintf("%s %q is not a duration: write it like 30s, 10m or 1h30m (0 for none)", what, s)}
	case d < 0:
		return 0, &sandbox.InvalidError{Reason: fmt.Sprintf("%s %q is negative", what, s)}
	}
	return d, nil
}

// until says how far t is from now, as ago does for the past.
func until(t time.Time) string {
	d := time.Until(t).Round(time.Second)
	switch {
	case d <= 0:
		return "now"
	case d < time.Minute:
		return "in " + d.String()
	case d < time.Hour:
		return fmt.Sprintf("in %dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("in %dh", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

// deadlineText is a neuron's deadline for a table: "in 29m (stop)".
func deadlineText(st *sandbox.State) string {
	if st.Deadline == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", until(*st.Deadline), actionOf(st))
}

func actionOf(st *sandbox.State) sandbox.TimeoutAction {
	if st.OnTimeout == "" {
		return sandbox.OnTimeoutStop
	}
	return st.OnTimeout
}

func labelsText(s labels.Set) string {
	if len(s) == 0 {
		return "-"
	}
	return s.String()
}

// lifecycleText is what status says of a neuron's labels, pause,
// deadline and idle rule.
func lifecycleText(st *sandbox.State) [][]string {
	var rows [][]string
	if len(st.Labels) > 0 {
		rows = append(rows, []string{"labels", st.Labels.String()})
	}
	if st.PausedAt != nil {
		rows = append(rows, []string{"paused", fmt.Sprintf("%s (%s); a request resumes it", st.PausedAt.Local().Format(time.RFC3339), ago(*st.PausedAt))})
	}
	if st.Deadline != nil {
		rows = append(rows, []string{"deadline", fmt.Sprintf("%s (%s, timeout %s), then %s", st.Deadline.Local().Format(time.RFC3339),
			until(*st.Deadline), st.Timeout, actionOf(st))})
	}
	if st.ForkedFrom != "" && st.ForkedAt != nil {
		rows = append(rows, []string{"forked from", fmt.Sprintf("%s at %s (%s)", st.ForkedFrom, st.ForkedAt.Local().Format(time.RFC3339), ago(*st.ForkedAt))})
	}
	if st.AutoPause > 0 {
		rows = append(rows, []string{"idle rule", fmt.Sprintf("pause after %s idle: no request and no attached client, CPU under 2%% of a core", st.AutoPause)})
	}
	return rows
}

// localCapability finds neuron ref (an id or a unique prefix) and its
// manager as the capability T, and asks the gate about action on it.
func localCapability[T any](ctx context.Context, a *App, ref, op string, action gate.Action) (T, *sandbox.State, error) {
	var zero T
	set, err := a.sandboxes()
	if err != nil {
		return zero, nil, err
	}
	m, st, err := set.Find(ctx, ref)
	if err != nil {
		return zero, nil, err
	}
	c, ok := m.(T)
	if !ok {
		return zero, nil, &sandbox.UnsupportedError{Mode: m.Mode(), Op: op}
	}
	if err := a.authorize(ctx, action, st.ID); err != nil {
		return zero, nil, err
	}
	return c, st, nil
}

// remoteNeuron finds neuron ref through the daemon.
func (a *App) remoteNeuron(ctx context.Context, api *cortex.Client, ref string) (*cortex.NeuronClient, *sandbox.State, error) {
	st, err := remoteFind(ctx, api, ref, true)
	if err != nil {
		return nil, nil, err
	}
	return api.Neuron(st.ID), st, nil
}

// setLabels changes neuron ref's labels.
func (a *App) setLabels(ctx context.Context, ref string, change labels.Change) (*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		n, _, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return nil, err
		}
		got, err := n.SetLabels(ctx, &cortex.LabelsUpdate{Set: change.Set, Remove: change.Remove})
		if err != nil {
			return nil, err
		}
		return stateOf(got), nil
	}
	l, st, err := localCapability[sandbox.Labeler](ctx, a, ref, "labels", gate.Label)
	if err != nil {
		return nil, err
	}
	return l.SetLabels(ctx, st.ID, change)
}

// setTimeout gives neuron ref a deadline d from now (0: none).
func (a *App) setTimeout(ctx context.Context, ref string, d time.Duration, action sandbox.TimeoutAction) (*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		n, _, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return nil, err
		}
		got, err := n.SetTimeout(ctx, d, string(action))
		if err != nil {
			return nil, err
		}
		return stateOf(got), nil
	}
	dl, st, err := localCapability[sandbox.Deadliner](ctx, a, ref, "timeouts", gate.Timeout)
	if err != nil {
		return nil, err
	}
	return dl.SetTimeout(ctx, st.ID, d, action)
}

// pause pauses neuron ref; a paused one answers sandbox.ErrAlreadyPaused
// with its state.
func (a *App) pause(ctx context.Context, ref string, toDisk bool) (*sandbox.State, error) {
	return a.pauseOp(ctx, ref, "pause", gate.Pause, sandbox.ErrAlreadyPaused,
		func(n *cortex.NeuronClient) (*cortex.Neuron, error) {
			return n.Pause(ctx, &cortex.PauseRequest{ToDisk: toDisk})
		},
		func(p sandbox.Pauser, id string) (*sandbox.State, error) {
			return p.Pause(ctx, id, sandbox.PauseOptions{ToDisk: toDisk, Reason: "requested"})
		})
}

// resume resumes neuron ref; a running one answers sandbox.ErrNotPaused
// with its state.
func (a *App) resume(ctx context.Context, ref string) (*sandbox.State, error) {
	return a.pauseOp(ctx, ref, "resume", gate.Resume, sandbox.ErrNotPaused,
		func(n *cortex.NeuronClient) (*cortex.Neuron, error) { return n.Resume(ctx) },
		func(p sandbox.Pauser, id string) (*sandbox.State, error) { return p.Resume(ctx, id) })
}

// pauseOp runs a pause or a resume (op) of neuron ref through the daemon
// when there is one (its EXISTS answer, "already so", becomes already with
// the neuron's state), else here through the gate.
func (a *App) pauseOp(ctx context.Context, ref, op string, action gate.Action, already error,
	remote func(*cortex.NeuronClient) (*cortex.Neuron, error), local func(sandbox.Pauser, string) (*sandbox.State, error)) (*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		n, st, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return nil, err
		}
		got, err := remote(n)
		if errors.As(err, &cortex.ExistsError{}) {
			return st, already
		}
		if err != nil {
			return nil, err
		}
		return stateOf(got), nil
	}
	p, st, err := localCapability[sandbox.Pauser](ctx, a, ref, op, action)
	if err != nil {
		return nil, err
	}
	return local(p, st.ID)
}

func (a *App) labelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "label ID KEY=VALUE... [KEY-...]",
		Short: "Set (KEY=VALUE) or remove (KEY-) a neuron's labels",
		Long: `label changes a neuron's labels, running or stopped: KEY=VALUE sets one,
KEY- removes one (as kubectl label does). Keys and values follow
Kubernetes' rules; a bad one is an error that names it, and nothing
changes. Labels survive destroy and create; destroy --wipe drops them.
It prints the neuron's id.`,
		Example:           "  nsys-cortex label job team=a run=43 stale-",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			change, err := labels.ParseChange(args[1:])
			if err != nil {
				return err
			}
			st, err := a.setLabels(cmd.Context(), args[0], change)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, st.ID)
			return nil
		},
	}
}

func (a *App) timeoutCommand() *cobra.Command {
	var onTimeout string
	cmd := &cobra.Command{
		Use:   "timeout ID DURATION",
		Short: "Give a running neuron a new deadline from now (0 clears it)",
		Long: `timeout sets a running neuron's deadline DURATION from now (10m, 1h30m), or
clears it (0). At the deadline its --on-timeout action happens: the one it
has unless given here (stop when it never had one; pause; destroy, which
keeps the data; wipe). A deadline holds whether or not nsys-cortex serve
runs (docs/lifecycle.md). It prints the neuron's id; the deadline goes to
stderr.`,
		Example:           "  nsys-cortex timeout job 10m\n  nsys-cortex timeout job 2h --on-timeout pause\n  nsys-cortex timeout job 0",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseDuration("timeout", args[1])
			if err != nil {
				return err
			}
			var action sandbox.TimeoutAction
			if onTimeout != "" {
				if action, err = sandbox.ParseTimeoutAction(onTimeout); err != nil {
					return err
				}
				if d == 0 {
					return &sandbox.InvalidError{Reason: "--on-timeout " + onTimeout + " needs a deadline: 0 clears it"}
				}
			}
			st, err := a.setTimeout(cmd.Context(), args[0], d, action)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, st.ID)
			if st.Deadline == nil {
				fmt.Fprintf(a.Stderr, "%s has no deadline\n", st.ID)
			} else {
				fmt.Fprintf(a.Stderr, "%s: deadline %s (%s), then %s\n", st.ID, st.Deadline.Local().Format(time.RFC3339), until(*st.Deadline), actionOf(st))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&onTimeout, "on-timeout", "", "the action at the deadline: stop, pause, destroy (data kept) or wipe (default: the neuron's own)")
	return cmd
}

func (a *App) pauseCommand() *cobra.Command {
	var toDisk bool
	cmd := &cobra.Command{
		Use:   "pause ID...",
		Short: "Pause neurons: every process stopped, memory kept",
		Long: `pause stops every process of a running neuron, its agent too, with its
memory kept; it uses no CPU until resume, or until any request that needs
it (exec, cp, a terminal, ...) resumes it first. status, list, stats and
events do not. --to-disk saves a microVM (qemu, firecracker) whole and
lets its VMM exit; other modes refuse it before touching the neuron.
Pausing a paused neuron says so and succeeds; a stopped one is an error.
It prints each neuron's id.`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.eachNeuron(args, func(ref string) (*sandbox.State, error) {
				st, err := a.pause(cmd.Context(), ref, toDisk)
				if errors.Is(err, sandbox.ErrAlreadyPaused) {
					fmt.Fprintf(a.Stderr, "%s is already paused\n", st.ID)
					err = nil
				}
				return st, err
			})
		},
	}
	cmd.Flags().BoolVar(&toDisk, "to-disk", false, "save the whole machine to disk and let its VMM exit (qemu, firecracker)")
	return cmd
}

func (a *App) resumeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID...",
		Short: "Resume paused neurons where they were",
		Long: `resume continues a paused neuron's processes where they were. Resuming a
running neuron says so and succeeds; a stopped one is an error. It prints
each neuron's id.`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.eachNeuron(args, func(ref string) (*sandbox.State, error) {
				st, err := a.resume(cmd.Context(), ref)
				if errors.Is(err, sandbox.ErrNotPaused) {
					fmt.Fprintf(a.Stderr, "%s is already running\n", st.ID)
					err = nil
				}
				return st, err
			})
		},
	}
}

// eachNeuron runs f for each ref, printing the id of each it did; the
// errors are joined (each names its neuron).
func (a *App) eachNeuron(refs []string, f func(ref string) (*sandbox.State, error)) error {
	var errs []error
	for _, ref := range refs {
		st, err := f(ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintln(a.Stdout, st.ID)
	}
	return errors.Join(errs...)
}
