// Package cli is the nsys-cortex command line: cobra commands over the
// sandbox set. It never names a backend; cmd/nsys-cortex hands it the
// registered ones.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/spf13/cobra"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/config"
	"github.com/nsys-cortex/cortex/internal/keeper"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Exit codes of the CLI's own failures (as docker run uses them); exec
// passes the command's own status through.
const (
	ExitFailure  = 125 // the CLI (or Cortex) failed
	ExitNoInvoke = 126 // the command could not be invoked
	ExitNotFound = 127 // the command was not found
)

// App is the command line application.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Version of this build.
	Version string
	// Backends are the isolation modes compiled in.
	Backends []sandbox.Backend
	// AgentEmbedded is the agent binary built into this executable, if any.
	AgentEmbedded []byte
	// SharedKeys opens the API keys a deployment's daemons share
	// (kube.api_keys; nil when it is unset); nil in the light program,
	// which runs the full one for a command that needs them.
	SharedKeys func() (apikey.Shared, error)
	// FullProgram opens the full program, checked, which the light build
	// runs for the commands it does not link (split.go); unused by a full
	// build.
	FullProgram func() (*os.File, error)
	// AwaitSignals returns once the signals that cancel the context Run
	// is given are caught; until then they end the process. A command
	// calls it before it changes anything (awaitSignals); nil: caught
	// already.
	AwaitSignals func()

	args []string // the command line Run was given

	once      sync.Once
	exclusive bool           // the daemon: own the neurons touched
	inKeeper  bool           // the standalone keeper: it is the home's keeper itself
	keeper    keeperSpawn    // the keeper this process started, if any
	cfg       *config.Config // loaded once by loadConfig
	// The daemon the CLI talks to (--api, NSYS_CORTEX_API_URL, api.url).
	apiURL     string
	api        *cortex.Client
	apiChecked bool
	set        *sandbox.Set
	env        sandbox.Env
	lay        layout.Layout
	setErr     error
	// --kube-port-forward: kube.port_forward for this process, when
	// given.
	kubePortForward optBool
}

// optBool is a boolean flag that knows whether it was given.
type optBool struct{ set, val bool }

func (o *optBool) String() string { return strconv.FormatBool(o.val) }
func (o *optBool) Type() string   { return "bool" }
func (o *optBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	o.set, o.val = true, b
	return nil
}

// exitError carries an exit status through cobra, and a message for
// stderr when there is one.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Run runs the command line and returns the process exit status.
func (a *App) Run(ctx context.Context, args []string) int {
	a.args = args
	if passThrough != nil {
		if err := passThrough(a, ctx, args); err != nil {
			return a.exit(err)
		}
	}
	root := a.rootCommand(args...)
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	err := root.ExecuteContext(ctx)
	if a.set != nil {
		a.set.Close()
	}
	return a.exit(err)
}

// exit prints what err says, if anything, and returns the exit status.
func (a *App) exit(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(a.Stderr, "nsys-cortex: %s\n", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(a.Stderr, "nsys-cortex: %s\n", describe(err))
	return ExitFailure
}

// rootCommand builds the command tree. A command line whose first word
// names a command gets a root with that command alone: building all of
// them (their flags, their help) is most of what a short command costs
// past the process start, and cobra needs the others only for help,
// suggestions and completion, whose words are not commands (issue 20;
// docs/benchmarks.md). With no args, or any other first word, the
// whole tree.
func (a *App) rootCommand(args ...string) *cobra.Command {
	root := &cobra.Command{
		Use:   "nsys-cortex",
		Short: "Isolated Linux environments (neurons) for AI agents",
		Long: `nsys-cortex gives every AI agent its own isolated Linux environment, a neuron,
and keeps Linux authority on the host. Everything an agent changes inside a
neuron survives destroy and create under the same id.

Home: ~/.nsys-cortex (NSYS_CORTEX_HOME). Mode: auto (NSYS_CORTEX_MODE).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every command waits for the signals to be caught before it
		// runs, but those that say where they start changing things.
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if cmd.Annotations[lateSignals] == "" {
				a.awaitSignals()
			}
		},
	}
	root.PersistentFlags().StringVar(&a.apiURL, "api", "", "talk to the daemon at this URL (default: NSYS_CORTEX_API_URL, api.url; none: work locally)")
	root.PersistentFlags().VarPF(&a.kubePortForward, "kube-port-forward", "",
		"kube mode, from outside the cluster: reach neurons through the API server's port-forward (kube.port_forward; for development)").NoOptDefVal = "true"
	makers := a.commandMakers()
	if len(args) > 0 {
		for _, m := range makers {
			if slices.Contains(m.names, args[0]) {
				root.AddCommand(m.make())
				return root
			}
		}
	}
	for _, m := range makers {
		root.AddCommand(m.make())
	}
	return root
}

// lateSignals annotates a command that calls awaitSignals itself, before
// it changes anything (exec: in connect, once it has read its settings),
// or never (one that changes nothing).
const lateSignals = "late-signals"

// awaitSignals waits until SIGINT, SIGTERM and SIGHUP cancel the
// command's context instead of ending the process.
func (a *App) awaitSignals() {
	if a.AwaitSignals != nil {
		a.AwaitSignals()
	}
}

// commandMaker builds one of the root's commands; names are the name and
// aliases it answers to (TestCommandMakers holds them to the command's).
type commandMaker struct {
	names []string
	make  func() *cobra.Command
}

// commandMakers lists the root's commands in the order help shows them.
func (a *App) commandMakers() []commandMaker {
	return []commandMaker{
		{[]string{"create"}, a.createCommand},
		{[]string{"list", "ls"}, a.listCommand},
		{[]string{"status"}, a.statusCommand},
		{[]string{"destroy", "rm"}, a.destroyCommand},
		{[]string{"exec"}, a.execCommand},
		{[]string{"shell"}, a.shellCommand},
		{[]string{"cp"}, a.cpCommand},
		{[]string{"ps"}, a.psCommand},
		{[]string{"logs"}, a.logsCommand},
		{[]string{"kill"}, a.killCommand},
		{[]string{"doctor"}, a.doctorCommand},
		{[]string{"version"}, a.versionCommand},
		{[]string{"cleanup-orphans"}, a.cleanupOrphansCommand},
		{[]string{"image"}, a.imageCommand},
		{[]string{"serve"}, a.serveCommand},
		{[]string{"config"}, a.configCommand},
		{[]string{"launch"}, a.launchCommand},
		{[]string{"receipts"}, a.receiptsCommand},
		{[]string{"attach"}, a.attachCommand},
		{[]string{"term"}, a.termCommand},
		{[]string{"mcp"}, a.mcpCommand},
		{[]string{"policy"}, a.policyCommand},
		{[]string{"tools"}, a.toolsCommand},
		{[]string{"chat"}, a.chatCommand},
		{[]string{"mount"}, a.mountCommand},
		{[]string{"umount"}, a.umountCommand},
		{[]string{"snapshot"}, a.snapshotCommand},
		{[]string{"label"}, a.labelCommand},
		{[]string{"timeout"}, a.timeoutCommand},
		{[]string{"pause"}, a.pauseCommand},
		{[]string{"resume"}, a.resumeCommand},
		{[]string{"fork"}, a.forkCommand},
		{[]string{"port-forward"}, a.portForwardCommand},
		{[]string{"url"}, a.urlCommand},
		{[]string{"export"}, a.exportCommand},
		{[]string{"import"}, a.importCommand},
		{[]string{"diff"}, a.diffCommand},
		{[]string{"stats"}, a.statsCommand},
		{[]string{"events"}, a.eventsCommand},
		{[]string{"keeper"}, a.keeperCommand},
		{[]string{"token"}, a.tokenCommand},
	}
}

// sandboxes returns the set of modes over the home directory.
func (a *App) sandboxes() (*sandbox.Set, error) {
	a.once.Do(func() {
		if _, a.setErr = a.loadConfig(); a.setErr != nil {
			return
		}
		a.lay, a.setErr = layout.FromEnv()
		if a.setErr != nil {
			return
		}
		var binOnce sync.Once
		var bin string
		var binErr error
		env := sandbox.Env{Layout: a.lay, AgentBinary: func() (string, error) {
			binOnce.Do(func() { bin, binErr = store.AgentBinary(a.lay.BinDir(), a.AgentEmbedded) })
			return bin, binErr
		}}
		env.Exclusive = a.exclusive
		// A neuron got a deadline or an idle rule: a keeper must watch it.
		// The daemon and the keeper are it (wake it); a CLI starts one.
		env.EnsureKeeper = a.ensureKeeper
		if a.exclusive || a.inKeeper {
			env.EnsureKeeper = func() { keeper.Wake(a.lay) }
		}
		if a.cfg != nil {
			env.DefaultDisk = a.cfg.Bytes("disk")
			env.MaxSnapshots = a.cfg.Int("snapshots.max")
			env.MaxSnapshotBytes = a.cfg.Bytes("snapshots.max_bytes")
			env.EgressUpstreamCA = a.cfg.String("egress.upstream_ca")
		}
		a.env = env
		a.set = sandbox.NewSet(env, append(slices.Clone(a.Backends), a.standIns()...)...)
	})
	return a.set, a.setErr
}

// neuronArgs completes neuron ids.
// neuronArgsUpTo completes neuron ids for a command's first n
// arguments, and nothing after them.
func (a *App) neuronArgsUpTo(n int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.neuronArgs(cmd, args, toComplete)
	}
}

func (a *App) neuronArgs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	all, err := set.List(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	out := make([]string, 0, len(all))
	for _, st := range all {
		out = append(out, st.ID+"\t"+string(st.Status))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// isTerminal reports whether r (a reader or a writer) is a terminal.
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
