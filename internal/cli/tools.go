//go:build !cortex_light

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/mcp"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/memory"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
)

// kitFlags are the flags of every command that builds a tool kit.
type kitFlags struct {
	neuron    string
	policy    string
	agent     string
	secretEnv []string
}

func (f *kitFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.neuron, "neuron", "", "the neuron the tools act on (id or unique prefix)")
	cmd.Flags().StringVar(&f.policy, "policy", "standard", "policy: a preset ("+strings.Join(policy.PresetNames(), ", ")+") or a rule file")
	cmd.Flags().StringVar(&f.agent, "agent", "", "the agent's name: its memory store and audit facts (default: the neuron id)")
	cmd.Flags().StringSliceVar(&f.secretEnv, "secret-env", nil, "mask the value of this variable of your environment wherever it appears in tool output (repeatable)")
}

// loadPolicy returns a preset by name, or the rule file at ref.
func loadPolicy(ref string) (*policy.Policy, error) {
	if strings.ContainsAny(ref, "/.") {
		return policy.Load(ref)
	}
	return policy.Preset(ref)
}

// secretName says which variables of the operator's environment look like
// credentials: their values are masked in tool output even unnamed (they
// are never passed into a neuron; masking covers copies that got there).
var secretName = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL|PRIVATE_?KEY)`)

// redactor masks the named variables' values and those of variables that
// look like credentials.
func redactor(named []string) (*redact.Redactor, error) {
	r := redact.New()
	for _, name := range named {
		v, ok := os.LookupEnv(name)
		if !ok {
			return nil, fmt.Errorf("--secret-env %s: no such variable in your environment", name)
		}
		if err := r.AddSecret(name, v); err != nil {
			return nil, fmt.Errorf("--secret-env %s: %w", name, err)
		}
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if secretName.MatchString(k) && len(v) >= 8 {
			_ = r.AddSecret(k, v) // best effort: a value too short to mask safely is skipped
		}
	}
	return r, nil
}

// kit builds the tool kit over a local neuron.
func (a *App) kit(ctx context.Context, f *kitFlags) (*tools.Kit, error) {
	if api, err := a.apiClient(); err != nil {
		return nil, err
	} else if api != nil {
		return nil, errors.New("the tool kit runs beside the neurons (their channel, the audit log and memory are on that host): run it there without --api / NSYS_CORTEX_API_URL")
	}
	if f.neuron == "" {
		return nil, errors.New("give the neuron the tools act on: --neuron ID")
	}
	p, err := loadPolicy(f.policy)
	if err != nil {
		return nil, err
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, err
	}
	_, st, err := set.Find(ctx, f.neuron)
	if err != nil {
		return nil, err
	}
	red, err := redactor(f.secretEnv)
	if err != nil {
		return nil, err
	}
	agent := f.agent
	if agent == "" {
		agent = st.ID
	}
	if !regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`).MatchString(agent) {
		return nil, fmt.Errorf("--agent %q: use letters, digits, '.', '_' or '-'", agent)
	}
	memPath := filepath.Join(a.lay.Home, "memory", agent+".db")
	return tools.New(tools.NewSetNeuron(set, a.lay, st.ID),
		tools.WithPolicy(p),
		tools.WithAudit(launch.NewAudit(filepath.Join(a.lay.LogsDir(), "audit.log"))),
		tools.WithRedactor(red),
		tools.WithAgent(agent),
		tools.WithMemory(func() (*memory.Store, error) { return memory.Open(memPath) }),
	)
}

func (a *App) mcpCommand() *cobra.Command {
	var (
		f        kitFlags
		httpAddr string
		token    string
		config   string
		noAttach bool
	)
	cmd := &cobra.Command{
		Use:   "mcp --neuron ID [--policy PRESET|FILE] [--http ADDR]",
		Short: shortMCP,
		Long: `mcp serves the neuron's tool kit (read, write, edit, apply_patch, bash,
process, grep, find, ls, elevated, neuron, snapshot, memory_*) to any MCP
client: Claude Code, Codex, Goose, your own. Every call goes through the
policy engine (--policy: readonly, standard, trusted or a rule file; see
docs/policy.md); each decision is an audit fact in <home>/logs/audit.log.
Calls the policy marks "ask" are put to the client's user when the client
supports MCP elicitation, and denied otherwise.

External MCP servers listed in <home>/mcp.json (or --mcp-config) are
attached as tools named mcp__SERVER__TOOL, in the "mcp" group: each starts
on the first call of one of its tools, with only the environment variables
its entry names.

Without --http it speaks MCP on stdin/stdout, e.g. for Claude Code:
  claude mcp add cortex -- nsys-cortex mcp --neuron ID
With --http ADDR it serves streamable HTTP at http://ADDR/mcp; an address
other than loopback needs --token (clients send Authorization: Bearer).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			kit, err := a.kit(ctx, &f)
			if err != nil {
				return err
			}
			if config == "" {
				config = filepath.Join(a.lay.Home, "mcp.json")
			}
			if !noAttach {
				cfg, err := mcp.LoadConfig(config)
				if err != nil {
					return err
				}
				for name, sc := range cfg.Servers {
					att, err := mcp.Attach(ctx, kit, name, sc, filepath.Join(a.lay.Home, "mcp"))
					if err != nil {
						return err
					}
					defer att.Close()
				}
			}
			if httpAddr == "" {
				return mcp.ServeStdio(ctx, kit, a.Version)
			}
			return a.serveMCPHTTP(ctx, kit, httpAddr, token)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (host:port) instead of stdio")
	cmd.Flags().StringVar(&token, "token", os.Getenv("NSYS_CORTEX_MCP_TOKEN"), "bearer token HTTP clients must send (NSYS_CORTEX_MCP_TOKEN)")
	cmd.Flags().StringVar(&config, "mcp-config", "", "external MCP servers to attach (default <home>/mcp.json)")
	cmd.Flags().BoolVar(&noAttach, "no-attach", false, "attach no external MCP servers")
	return cmd
}

func (a *App) serveMCPHTTP(ctx context.Context, kit *tools.Kit, addr, token string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ap, ok := ln.Addr().(*net.TCPAddr); ok && !ap.IP.IsLoopback() && token == "" {
		ln.Close()
		return fmt.Errorf("mcp --http %s is not a loopback address: give --token (or NSYS_CORTEX_MCP_TOKEN) so clients must authenticate", addr)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.Protect(mcp.HTTPHandler(kit, a.Version), token))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.Stderr, "nsys-cortex: MCP on http://%s/mcp (policy %s)\n", ln.Addr(), kit.Policy().Name)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-errc
		return nil
	}
}

func (a *App) policyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: shortPolicy,
	}
	var f kitFlags
	var tool, input string
	explain := &cobra.Command{
		Use:   "explain --tool NAME --input JSON [--policy PRESET|FILE] [--neuron ID]",
		Short: "Print the decision a policy makes on one tool call, and the rule that made it",
		Long: `explain decides one tool call as the tool kit would, without running it,
and prints every check: tool-group access, each path (resolved inside the
neuron when --neuron is given), each simple command of a shell line
(wrappers such as bash -c, env, sudo, xargs unwrapped), elevation.

  nsys-cortex policy explain --tool bash --input '{"command":"git push origin main"}'
  nsys-cortex policy explain --policy readonly --tool write --input '{"path":"a.txt","content":"x"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if tool == "" {
				return errors.New("give the tool: --tool NAME")
			}
			var kit *tools.Kit
			var err error
			if f.neuron != "" {
				kit, err = a.kit(ctx, &f)
			} else {
				var p *policy.Policy
				if p, err = loadPolicy(f.policy); err == nil {
					kit, err = tools.New(tools.Detached(), tools.WithPolicy(p))
				}
			}
			if err != nil {
				return err
			}
			plan, err := kit.Explain(ctx, tool, json.RawMessage(input))
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "policy %s\n%s", kit.Policy().Name, plan.Explanation.String())
			if plan.Explanation.Decision.Effect != policy.Allow {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f.register(explain)
	explain.Flags().StringVar(&tool, "tool", "", "the tool (bash, read, write, ...)")
	explain.Flags().StringVar(&input, "input", "{}", "the tool's input as JSON")
	presets := &cobra.Command{
		Use:   "show [PRESET|FILE]",
		Short: "Print a policy (a preset or a rule file) as JSON",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref := "standard"
			if len(args) == 1 {
				ref = args[0]
			}
			p, err := loadPolicy(ref)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(a.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(p)
		},
	}
	cmd.AddCommand(explain, presets)
	return cmd
}

func (a *App) toolsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tools",
		Short: shortTools,
	}
	var lf kitFlags
	list := &cobra.Command{
		Use:   "list [--policy PRESET|FILE]",
		Short: "List the tools a policy offers, with their groups",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadPolicy(lf.policy)
			if err != nil {
				return err
			}
			kit, err := tools.New(tools.Detached(), tools.WithPolicy(p))
			if err != nil {
				return err
			}
			var rows [][]string
			for _, t := range kit.Tools() {
				desc, _, _ := strings.Cut(t.Description, "\n")
				desc, _, _ = strings.Cut(desc, ". ")
				desc = strings.TrimSuffix(strings.TrimSuffix(desc, "."), ":")
				rows = append(rows, []string{t.Name, string(t.Group), hints(t.Annotations), desc})
			}
			return table(a.Stdout, []string{"TOOL", "GROUP", "HINTS", "WHAT"}, rows)
		},
	}
	list.Flags().StringVar(&lf.policy, "policy", "standard", "policy: a preset or a rule file")
	var cf kitFlags
	var input string
	callCmd := &cobra.Command{
		Use:   "call NAME --neuron ID [--input JSON]",
		Short: "Call one tool on a neuron, through the policy, and print its result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kit, err := a.kit(cmd.Context(), &cf)
			if err != nil {
				return err
			}
			r := kit.Call(cmd.Context(), args[0], json.RawMessage(input))
			if r.IsError {
				fmt.Fprintln(a.Stderr, r.Text)
				return &exitError{code: 1}
			}
			fmt.Fprintln(a.Stdout, r.Text)
			return nil
		},
	}
	cf.register(callCmd)
	callCmd.Flags().StringVar(&input, "input", "{}", "the tool's input as JSON")
	cmd.AddCommand(list, callCmd)
	return cmd
}

func hints(a tools.Annotations) string {
	var h []string
	if a.ReadOnly {
		h = append(h, "read-only")
	}
	if a.Destructive {
		h = append(h, "destructive")
	}
	if a.Idempotent {
		h = append(h, "idempotent")
	}
	if a.OpenWorld {
		h = append(h, "open-world")
	}
	return strings.Join(h, ",")
}
