package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/layout"
)

func (a *App) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage the API's keys: scoped, per tenant, shown once",
		Long: `token manages the keys of this home's API daemon (serve), for the teams or
agents that share it. A key has scopes (what it may do) and may have a
selector (which neurons it sees: those whose labels match; any other
neuron is, to that key, one that does not exist). Neurons a key creates
get its selector's labels. The daemon's own token (NSYS_CORTEX_API_TOKEN,
api.token) stays the admin key, with no limits.

The keys are kept in the home (api-keys.json, owner-only), hashed: a key's
token is printed once, by create, and never again. The daemon takes a key
made or removed from its next request on. Run token where the daemon runs.`,
	}
	cmd.AddCommand(a.tokenCreateCommand(), a.tokenListCommand(), a.tokenRemoveCommand())
	return cmd
}

func (a *App) tokenCreateCommand() *cobra.Command {
	var scopes, selector string
	var rate float64
	var maxNeurons int
	var e2b bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Make an API key and print its token (once)",
		Long: `create makes key NAME and prints its token on stdout: keep it, it is not
shown again (it is kept only hashed). Scopes (--scope, comma-separated):

  read       status, lists, events, metrics, snapshot lists (every scope has it)
  exec       exec, background processes, the neurons' ports
  files      reading and writing files, diffs
  terminals  terminals
  admin      everything: create, destroy, labels, timeouts, pause, fork,
             snapshots, export, import, chat sessions

--selector KEY=VALUE[,KEY=VALUE] makes the key a tenant's: it sees only
neurons with those labels, and the neurons it creates, forks or imports get
them. --rate and --max-neurons set the key's own limits (requests a second;
neurons running or paused); left out, the daemon's api.key_rate and
api.key_neurons apply.

--e2b prints the token in E2B's form (e2b_ and 64 hex digits), for
E2B_API_KEY against serve --e2b (docs/e2b.md); it is a key like the others,
with scope admin unless --scope says otherwise.
The token is alone on the last line of the output.`,
		Example: "  nsys-cortex token create ci --scope exec,files\n" +
			"  nsys-cortex token create team-a --scope admin --selector team=a --max-neurons 20",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if e2b && !cmd.Flags().Changed("scope") {
				scopes = "admin" // an E2B key creates and drives sandboxes, as E2B's own keys do
			}
			sc, err := gate.ParseScopes(scopes)
			if err != nil {
				return fmt.Errorf("--scope: %w", err)
			}
			sel, err := apikey.ParseSelector(selector)
			if err != nil {
				return fmt.Errorf("--selector: %w", err)
			}
			if rate < 0 || maxNeurons < 0 {
				return fmt.Errorf("--rate and --max-neurons cannot be negative")
			}
			lay, err := layout.FromEnv()
			if err != nil {
				return err
			}
			keys, err := a.keyStore(cmd.Context(), lay)
			if err != nil {
				return err
			}
			token, _, err := keys.Create(apikey.Key{Name: args[0], Scopes: sc, Selector: sel, Rate: rate, MaxNeurons: maxNeurons, E2B: e2b})
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, token)
			how := "send it as Authorization: Bearer ..."
			if e2b {
				how = "E2B's SDKs take it as E2B_API_KEY; docs/e2b.md"
			}
			fmt.Fprintf(a.Stderr, "nsys-cortex: key %s made; its token is above and is not shown again (%s)\n", args[0], how)
			return nil
		},
	}
	cmd.Flags().StringVar(&scopes, "scope", "read", "what the key may do: read, exec, files, terminals, admin (comma-separated)")
	cmd.Flags().StringVar(&selector, "selector", "", "the labels of the neurons the key sees, and gives those it makes: KEY=VALUE[,KEY=VALUE]")
	cmd.Flags().Float64Var(&rate, "rate", 0, "requests a second the key may send (0: the daemon's api.key_rate)")
	cmd.Flags().BoolVar(&e2b, "e2b", false, "print the token in E2B's form (e2b_...) for E2B's SDKs; scope admin unless --scope says otherwise")
	cmd.Flags().IntVar(&maxNeurons, "max-neurons", 0, "neurons, running or paused, the key may hold (0: the daemon's api.key_neurons)")
	return cmd
}

var tokenListing = listing[apikey.Listed]{
	header: []string{"NAME", "SCOPES", "SELECTOR", "CREATED", "LAST USED"},
	row: func(k apikey.Listed) []string {
		sc := make([]string, len(k.Scopes))
		for i, s := range k.Scopes {
			sc[i] = string(s)
		}
		sel, used := k.Selector.String(), "never"
		if sel == "" {
			sel = "(all neurons)"
		}
		if !k.LastUsed.IsZero() {
			used = ago(k.LastUsed)
		}
		return []string{k.Name, strings.Join(sc, ","), sel, ago(k.Created), used}
	},
	name: func(k apikey.Listed) string { return k.Name },
}

func (a *App) tokenListCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the API keys (never their tokens)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := tokenListing.mode(&out)
			if err != nil {
				return err
			}
			lay, err := layout.FromEnv()
			if err != nil {
				return err
			}
			st, err := a.keyStore(cmd.Context(), lay)
			if err != nil {
				return err
			}
			keys, err := st.List()
			if err != nil {
				return err
			}
			for i := range keys {
				keys[i].Hash = "" // not the secret, but nothing a reader needs
			}
			return tokenListing.print(&out, a.Stdout, mode, keys)
		},
	}
	tokenListing.addFlags(&out, cmd, "{{.Name}} {{.Scopes}}")
	return cmd
}

func (a *App) tokenRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove"},
		Short:   "Remove API keys: the daemon refuses them from its next request on",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lay, err := layout.FromEnv()
			if err != nil {
				return err
			}
			st, err := a.keyStore(cmd.Context(), lay)
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := st.Remove(name); err != nil {
					return err
				}
				fmt.Fprintln(a.Stdout, name)
			}
			return nil
		},
	}
}
