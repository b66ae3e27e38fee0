package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

func (a *App) createCommand() *cobra.Command {
	var mode, network, memory, diskSize, image, ctxDir string
	var env, allow []string
	var lc lifecycleFlags
	var boot time.Duration
	var nested bool
	var secrets, secretHosts []string
	var pids int
	var cpus float64
	cmd := &cobra.Command{
		Use:   "create [ID]",
		Short: "Create a neuron (or bring one back with its data); prints its id",
		Long: `Create starts a neuron and prints its id (a new one when ID is omitted).
A neuron created again under an id it had before gets all its data back.

--mode auto (the default, or NSYS_CORTEX_MODE) picks the best isolation this
machine can run and says on stderr which it chose and why.

The network is none (a loopback of its own) unless asked: --allow gives the
neuron an HTTP proxy (http_proxy and https_proxy are set) that reaches only
what the allow-list names, and nothing else is routed; --network full gives
it the host's network.

--label team=a (repeatable) tags the neuron (list -l selects by labels);
--timeout 30m gives it a deadline, when --on-timeout happens (stop, the
default; pause; destroy, which keeps the data; wipe); --auto-pause 5m
pauses it once it has been idle that long. docs/lifecycle.md says who
enforces them.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var set *sandbox.Set
			api, err := a.apiClient()
			if err != nil {
				return err
			}
			if api == nil {
				if set, err = a.sandboxes(); err != nil {
					return err
				}
			}
			id := ids.New()
			if len(args) == 1 {
				id = args[0]
				if err := ids.Validate(id); err != nil {
					return err
				}
			}
			opts := sandbox.CreateOptions{Env: env, BootTimeout: boot, Image: image, NestedUserns: nested,
				Limits: sandbox.Limits{Pids: pids, CPUs: cpus}, Network: sandbox.Network{Allow: allow}}
			if err := lc.apply(&opts); err != nil {
				return err
			}
			if opts.Secrets, err = secretFlags(secrets, secretHosts); err != nil {
				return err
			}
			if opts.Network.Mode, err = sandbox.ParseNetworkMode(network); err != nil {
				return err
			}
			if len(allow) > 0 && opts.Network.Mode == sandbox.NetworkDefault {
				opts.Network.Mode = sandbox.NetworkEgress // --allow says what egress reaches
			}
			if err := sandbox.AllowSecretHosts(&opts); err != nil {
				return err
			}
			if memory != "" {
				if opts.Limits.MemoryBytes, err = parseBytes(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			if diskSize != "" {
				if opts.Limits.DiskBytes, err = parseBytes(diskSize); err != nil {
					return fmt.Errorf("--disk: %w", err)
				}
			}
			if image != "" {
				if opts.Image, err = filepath.Abs(image); err != nil {
					return err
				}
			}
			if ctxDir != "" {
				if api != nil {
					return errors.New("--ctx: creating a neuron with /ctx goes through the local host (the mount is there), not --api")
				}
				if opts.Ctx, err = filepath.Abs(ctxDir); err != nil {
					return err
				}
			}
			st, why, err := a.create(cmd.Context(), set, id, mode, opts)
			if why != "" && why != "requested" {
				fmt.Fprintf(a.Stderr, "mode: %s (auto: %s — see nsys-cortex doctor)\n", st.Mode, why)
			}
			var ar *sandbox.AlreadyRunningError
			if errors.As(err, &ar) {
				if differ := policyChanges(cmd, opts, ar.State.Policy); len(differ) > 0 {
					return &sandbox.InvalidError{Reason: fmt.Sprintf("%s is already running (mode %s, pid %d) with another %s: "+
						"a running neuron's policy cannot change; destroy it first (its data stays)",
						ar.State.ID, ar.State.Mode, ar.State.PID, strings.Join(differ, ", "))}
				}
				fmt.Fprintf(a.Stderr, "%s is already running (mode %s, pid %d)", ar.State.ID, ar.State.Mode, ar.State.PID)
				if cmd.Flags().Changed("env") || cmd.Flags().Changed("boot-timeout") {
					fmt.Fprint(a.Stderr, "; the options given were not applied: destroy it first to change them")
				}
				if lc.given(cmd) {
					fmt.Fprintf(a.Stderr, "; its labels, deadline and idle rule were not changed (nsys-cortex label %s, nsys-cortex timeout %s change them)",
						ar.State.ID, ar.State.ID)
				}
				fmt.Fprintln(a.Stderr)
				fmt.Fprintln(a.Stdout, ar.State.ID)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, st.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "isolation mode: auto, or one of the modes doctor lists")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE in the neuron's environment, for this run of it (repeatable)")
	cmd.Flags().DurationVar(&boot, "boot-timeout", 0, "how long to wait for the neuron's agent (default 10s; docker 1m)")
	cmd.Flags().StringVar(&network, "network", "", "none (loopback only; the default where enforceable), egress (with --allow), or full")
	cmd.Flags().StringArrayVar(&secrets, "secret", nil, "give the neuron a placeholder for the secret in this variable of yours; the egress proxy puts the value into HTTPS requests to its --secret-host (repeatable; nsbox; docs/secrets.md)")
	cmd.Flags().StringArrayVar(&secretHosts, "secret-host", nil, "NAME=HOST[:PORT]: where --secret NAME may be sent (repeatable; added to --allow)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "what --network egress may reach: host[:port], *.domain[:port], address or CIDR[:port] (repeatable; implies --network egress)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory ceiling, e.g. 512m or 2g (default 2g where enforceable)")
	cmd.Flags().IntVar(&pids, "pids", 0, "process ceiling (default 1024 where enforceable)")
	cmd.Flags().StringVar(&diskSize, "disk", "", "disk ceiling of the neuron's data, e.g. 2g: a filesystem of its own, ENOSPC inside past it (default: the disk setting, 10g, where enforceable)")
	cmd.Flags().Float64Var(&cpus, "cpus", 0, "CPU ceiling in cores, e.g. 1.5 (default none)")
	cmd.Flags().StringVar(&ctxDir, "ctx", "", "show this CortexFS mount (nsys-cortex mount DIR) at /ctx inside: the neuron sees its own subtree, writable only if the mount validates at start; nsbox only")
	cmd.Flags().BoolVar(&nested, "nested-userns", false, "let programs create user namespaces of their own (inner sandboxes: bubblewrap, Codex's sandbox); nsbox only")
	cmd.Flags().StringVar(&image, "image", "", "a root filesystem directory to base the neuron on (default: the host's /usr and /etc subset)")
	lc.add(cmd)
	return cmd
}

// policyChanges names the policy flags given whose values differ from
// what the running neuron enforces (all of them when that is unknown).
func policyChanges(cmd *cobra.Command, want sandbox.CreateOptions, have *sandbox.Policy) []string {
	var differ []string
	changed := func(flag string) bool { return cmd.Flags().Changed(flag) }
	if have == nil {
		have = &sandbox.Policy{}
	}
	if changed("network") || changed("allow") {
		mode := want.Network.Mode
		if mode == sandbox.NetworkDefault {
			mode = sandbox.NetworkNone
		}
		if mode != have.Network.Mode || !sameSet(want.Network.Allow, have.Network.Allow) {
			differ = append(differ, "network")
		}
	}
	if changed("memory") && want.Limits.MemoryBytes != have.Limits.MemoryBytes {
		differ = append(differ, "memory limit")
	}
	if changed("pids") && want.Limits.Pids != have.Limits.Pids {
		differ = append(differ, "process limit")
	}
	if changed("cpus") && want.Limits.CPUs != have.Limits.CPUs {
		differ = append(differ, "CPU limit")
	}
	if changed("disk") && want.Limits.DiskBytes != have.Limits.DiskBytes {
		differ = append(differ, "disk ceiling")
	}
	if changed("image") && want.Image != have.Image {
		differ = append(differ, "image")
	}
	if changed("nested-userns") && want.NestedUserns != have.NestedUserns {
		differ = append(differ, "nested user namespaces")
	}
	if changed("secret") || changed("secret-host") {
		var names []string
		for _, s := range want.Secrets {
			names = append(names, s.Name)
		}
		if !sameSet(names, have.SecretNames()) {
			differ = append(differ, "set of secrets")
		}
	}
	return differ
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x]--; seen[x] < 0 {
			return false
		}
	}
	return true
}

// policyText describes a policy in one line per part, for status.
func policyText(p *sandbox.Policy) [][]string {
	if p == nil {
		return nil
	}
	network := string(p.Network.Mode)
	if p.Network.Mode == sandbox.NetworkEgress {
		network += " to " + strings.Join(p.Network.Allow, ", ")
	}
	var limits []string
	if l := p.Limits; l.MemoryBytes > 0 {
		limits = append(limits, fmt.Sprintf("memory %s", sizeText(l.MemoryBytes)))
	}
	if p.Limits.Pids > 0 {
		limits = append(limits, fmt.Sprintf("%d processes", p.Limits.Pids))
	}
	if p.Limits.CPUs > 0 {
		limits = append(limits, fmt.Sprintf("%g CPUs", p.Limits.CPUs))
	}
	if p.Limits.DiskBytes > 0 {
		limits = append(limits, fmt.Sprintf("disk %s", sizeText(p.Limits.DiskBytes)))
	}
	if len(limits) == 0 {
		limits = []string{"none"}
	}
	rows := [][]string{{"network", network}, {"limits", strings.Join(limits, ", ")}}
	if p.Image != "" {
		rows = append(rows, []string{"image", p.Image})
	}
	if p.NestedUserns {
		rows = append(rows, []string{"userns", "nested user namespaces allowed (inner sandboxes)"})
	}
	for _, s := range p.Secrets {
		rows = append(rows, []string{"secret", s.Name + " (a placeholder inside; put in by the proxy for " + strings.Join(s.Hosts, ", ") + ")"})
	}
	return rows
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseBytes reads 512, 512k, 64m, 2g (powers of 1024; a trailing b or ib is allowed).
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		case 't':
			mult, t = 1<<40, t[:n-1]
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size (like 512m or 2g)", s)
	}
	return int64(n * float64(mult)), nil
}

// neuronListing is how list shows neurons.
var neuronListing = listing[*sandbox.State]{
	header: []string{"ID", "MODE", "STATUS", "PID", "CREATED"},
	row: func(st *sandbox.State) []string {
		return []string{st.ID, st.Mode, string(st.Status), pidText(st.PID), ago(st.CreatedAt)}
	},
	name: func(st *sandbox.State) string { return st.ID },
	wide: []string{"WORKDIR", "OVERLAY", "DEADLINE", "LABELS"},
	wideRow: func(st *sandbox.State) []string {
		return []string{st.Workdir, st.OverlayPath, deadlineText(st), labelsText(st.Labels)}
	},
}

func (a *App) listCommand() *cobra.Command {
	var out outputFlags
	var selector string
	cmd := &cobra.Command{
		Use:     "list [-l SELECTOR]",
		Aliases: []string{"ls"},
		Short:   "List neurons, running, paused and stopped",
		Long: `List shows every neuron of the home, running, paused or stopped; -l keeps
those whose labels match a selector, in kubectl's syntax: team=a,run!=42,
'env in (ci,dev)', 'env notin (prod)', canary, '!canary' (all must hold).
-o wide adds the deadline and the labels. Listing never resumes a paused
neuron.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := neuronListing.mode(&out)
			if err != nil {
				return err
			}
			sel, err := labels.Parse(selector)
			if err != nil {
				return err
			}
			all, err := a.list(cmd.Context(), sel)
			if err != nil {
				return err
			}
			return neuronListing.print(&out, a.Stdout, mode, all)
		},
	}
	neuronListing.addFlags(&out, cmd, "{{.ID}} {{.Status}}")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only the neurons whose labels match, e.g. team=a,run!=42")
	return cmd
}

func pidText(pid int) string {
	if pid <= 0 {
		return "-"
	}
	return strconv.Itoa(pid)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String() + " ago"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

// statusView is what `status` reports: the state and, for a running neuron
// this process can reach, the agent's health.
type statusView struct {
	*sandbox.State
	Health *protocol.HealthResult `json:"health,omitempty"`
}

func (a *App) statusCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:               "status ID",
		Short:             "Show a neuron's state (and its agent's health when it runs)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := out.mode("json", "yaml", "name")
			if err != nil {
				return err
			}
			st, c, err := a.find(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			v := statusView{State: st}
			if c != nil {
				// Health is a bonus (the state stands alone), and an
				// inspection: quiet, it never resumes a paused neuron nor
				// keeps an idle one awake.
				v.Health, _ = c.Health(link.Quiet(cmd.Context()))
			}
			if done, err := out.emit(a.Stdout, mode, v, []any{v}); done {
				return err
			}
			if mode == "name" {
				fmt.Fprintln(a.Stdout, st.ID)
				return nil
			}
			rows := [][]string{
				{"id", st.ID}, {"mode", st.Mode}, {"status", string(st.Status)}, {"pid", pidText(st.PID)},
				{"workdir", st.Workdir}, {"overlay", st.OverlayPath}, {"created", ago(st.CreatedAt)},
			}
			rows = append(rows, lifecycleText(st)...)
			rows = append(rows, policyText(st.Policy)...)
			if st.Owner != nil {
				rows = append(rows, []string{"owner", fmt.Sprintf("%s (pid %d)", st.Owner.Command, st.Owner.PID)})
			}
			if h := v.Health; h != nil {
				rows = append(rows, []string{"agent", fmt.Sprintf("%s, protocol %s", h.Version, h.Protocol)},
					[]string{"uptime", (time.Duration(h.UptimeMs) * time.Millisecond).Round(time.Second).String()},
					[]string{"memory", fmt.Sprintf("%.1f MiB resident", float64(h.RSSBytes)/(1<<20))},
					[]string{"commands", strconv.FormatInt(h.Commands, 10)},
					[]string{"processes", fmt.Sprintf("%d background, %d terminals", h.Processes, h.Ptys)})
			}
			for _, r := range rows {
				fmt.Fprintf(a.Stdout, "%-10s %s\n", r[0]+":", r[1])
			}
			return nil
		},
	}
	out.add(cmd, "json, yaml, name", "{{.Status}} {{.PID}}")
	return cmd
}

func (a *App) destroyCommand() *cobra.Command {
	var wipe bool
	cmd := &cobra.Command{
		Use:   "destroy ID...",
		Short: "Stop neurons (their data stays unless --wipe)",
		Long: `Destroy stops a neuron and every process in it. Its data (the overlay) stays,
so create with the same id brings it back; --wipe deletes the data for good.`,
		Aliases:           []string{"rm"},
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, ref := range args {
				if err := a.destroy(cmd.Context(), ref, wipe); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(a.Stdout, ref)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&wipe, "wipe", false, "also delete the neuron's data")
	return cmd
}

func (a *App) doctorCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show what each isolation mode needs and whether this machine has it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := out.mode("json", "yaml")
			if err != nil {
				return err
			}
			set, err := a.sandboxes()
			if err != nil {
				return err
			}
			checks := set.Checks(cmd.Context())
			auto := "refuses"
			if m, why, err := set.Resolve(cmd.Context(), sandbox.ModeAuto); err == nil {
				auto = m.Mode() + ": " + why
			} else {
				auto = "refuses: " + err.Error()
			}
			report := struct {
				Home   string          `json:"home"`
				Auto   string          `json:"auto"`
				Modes  []sandbox.Check `json:"modes"`
				System string          `json:"system"`
			}{a.lay.Home, auto, checks, runtime.GOOS + "/" + runtime.GOARCH}
			if done, err := out.emit(a.Stdout, mode, report, []any{report}); done {
				return err
			}
			fmt.Fprintf(a.Stdout, "home: %s\n", a.lay.Home)
			for _, c := range checks {
				mark := "ok  "
				if !c.OK {
					mark = "no  "
				}
				iso := "isolating"
				if !c.Isolating {
					iso = "NOT isolating"
				}
				fmt.Fprintf(a.Stdout, "\n%s%s (%s): %s\n", mark, c.Mode, iso, c.Summary)
				for _, it := range c.Items {
					m := "+"
					if !it.OK {
						m = "-"
					}
					fmt.Fprintf(a.Stdout, "    %s %s: %s\n", m, it.Name, it.Detail)
				}
			}
			fmt.Fprintf(a.Stdout, "\nauto: %s\n", auto)
			if missing := set.Missing(); len(missing) > 0 {
				fmt.Fprintf(a.Stdout, "\nnot in this build yet: %s (see docs/modes.md)\n", strings.Join(missing, ", "))
			}
			return nil
		},
	}
	out.add(cmd, "json, yaml", "{{.Auto}}")
	return cmd
}

func (a *App) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:         "version",
		Short:       "Print the version",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{lateSignals: "never: it changes nothing"},
		RunE: func(cmd *cobra.Command, args []string) error {
			agent := "not embedded"
			if len(a.AgentEmbedded) > 0 {
				agent = fmt.Sprintf("embedded (%d bytes)", len(a.AgentEmbedded))
			}
			fmt.Fprintf(a.Stdout, "nsys-cortex %s\nprotocol %s\nagent %s\n%s %s/%s\n", a.Version, protocol.Version(), agent,
				runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

func (a *App) cleanupOrphansCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cleanup-orphans",
		Short: "Kill agents that run for this home but that no neuron's state knows",
		Long: `cleanup-orphans finds cortex-agent processes serving this home directory whose
neuron has no state file naming them, and kills them. Cortex never does this on
its own; run it from operator scripts when needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := a.sandboxes()
			if err != nil {
				return err
			}
			for _, name := range set.Modes() {
				m, err := set.Manager(name)
				if err != nil {
					continue
				}
				oc, ok := m.(sandbox.OrphanCleaner)
				if !ok {
					continue
				}
				killed, err := oc.CleanupOrphans(cmd.Context())
				if err != nil {
					return err
				}
				for _, k := range killed {
					fmt.Fprintf(a.Stdout, "killed %s orphan %s\n", name, k)
				}
			}
			return nil
		},
	}
}

// secretFlags reads --secret NAME (the value from this process's
// environment, never the command line) and --secret-host NAME=HOST.
func secretFlags(names, hosts []string) ([]sandbox.Secret, error) {
	var out []sandbox.Secret
	for _, name := range names {
		if slices.ContainsFunc(out, func(s sandbox.Secret) bool { return s.Name == name }) {
			return nil, fmt.Errorf("--secret %s: given twice", name)
		}
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("--secret %s: %s is not set in this environment (the value comes from there, never from the command line)", name, name)
		}
		out = append(out, sandbox.Secret{Name: name, Value: v})
	}
	for _, h := range hosts {
		name, host, ok := strings.Cut(h, "=")
		i := slices.IndexFunc(out, func(s sandbox.Secret) bool { return s.Name == name })
		switch {
		case !ok || host == "":
			return nil, fmt.Errorf("--secret-host %q: want NAME=HOST[:PORT]", h)
		case i < 0:
			return nil, fmt.Errorf("--secret-host %s: no --secret %s", h, name)
		}
		out[i].Hosts = append(out[i].Hosts, host)
	}
	for _, s := range out {
		if len(s.Hosts) == 0 {
			return nil, fmt.Errorf("--secret %s: no --secret-host %s=HOST says where it may go", s.Name, s.Name)
		}
	}
	return out, nil
}
