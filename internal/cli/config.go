package cli

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/config"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/store"
)

// configItem is one key as config list shows it.
type configItem struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	Source      string `json:"source"`
	Env         string `json:"env"`
	Default     string `json:"default"`
	Description string `json:"description"`
}

func (a *App) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change settings (<home>/config.json)",
		Long: `config shows and changes Cortex's settings. Each key has a name in the file
(api.listen) and an environment variable (NSYS_CORTEX_API_LISTEN). A value
comes from, highest first: a command-line flag, the environment variable,
the file <home>/config.json, the key's default. The file is changed only
by set and unset (or by hand); a running daemon reads it when it starts.

Secret keys (api.token) are shown as <set> unless asked for with --reveal,
and are never put in the environment of the processes Cortex starts.
docs/config.md describes every key.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.configPathCommand(), a.configListCommand(), a.configGetCommand(),
		a.configSetCommand(), a.configUnsetCommand())
	return cmd
}

// configFile is the configuration file of the home directory.
func configFile() (string, error) {
	lay, err := layout.FromEnv()
	if err != nil {
		return "", err
	}
	return lay.ConfigFile(), nil
}

// readConfig loads the configuration file as it is, without putting
// anything in the environment (so sources read true).
func readConfig() (*config.Config, error) {
	path, err := configFile()
	if err != nil {
		return nil, err
	}
	return config.Load(path)
}

// configKeyArgs completes key names.
func configKeyArgs(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, k := range config.Keys() {
		out = append(out, k.Name+"\t"+k.Description)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (a *App) configPathCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "path",
		Short: "Print the configuration file's path (it need not exist)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := configFile()
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, path)
			return nil
		},
	}
}

// configListing is how config list shows the keys.
var configListing = listing[configItem]{
	header: []string{"NAME", "VALUE", "SOURCE", "ENV"},
	row:    func(it configItem) []string { return []string{it.Key, it.Value, it.Source, it.Env} },
}

func (a *App) configListCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List every key with its value and where the value comes from",
		Long: `list shows every key: its effective value (secrets as <set>), where that
value comes from (flag, env, file or default) and its environment variable.
An environment variable whose value the key does not accept is listed as it
is, and the command then fails naming it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := configListing.mode(&out)
			if err != nil {
				return err
			}
			c, err := readConfig()
			if err != nil {
				return err
			}
			var list []configItem
			for _, k := range config.Keys() {
				v, src, err := c.Display(k.Name)
				if err != nil { // an invalid environment value: show it, fail below
					v = os.Getenv(k.Env)
					if k.Secret {
						v = "<set>"
					}
				}
				list = append(list, configItem{Key: k.Name, Value: v, Source: string(src), Env: k.Env,
					Default: k.Default, Description: k.Description})
			}
			if err := configListing.print(&out, a.Stdout, mode, list); err != nil {
				return err
			}
			return c.Validate()
		},
	}
	configListing.addFlags(&out, cmd, "{{.Key}}={{.Value}}")
	return cmd
}

func (a *App) configGetCommand() *cobra.Command {
	var reveal bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the effective value of a key",
		Long: `get prints the value KEY has now, from the flag, environment, file or
default in that order. A secret prints as <set> (or nothing when unset)
unless --reveal is given.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: configKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := config.Lookup(args[0]); err != nil {
				return err
			}
			c, err := readConfig()
			if err != nil {
				return err
			}
			get := c.Display
			if reveal {
				get = c.Get
			}
			v, _, err := get(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&reveal, "reveal", false, "print a secret's value instead of <set>")
	return cmd
}

func (a *App) configSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set KEY VALUE",
		Short: "Write a key's value to the configuration file",
		Long: `set checks VALUE against KEY and writes it to <home>/config.json, keeping the
other keys; the file is replaced atomically and readable only by you (mode
0600). VALUE - reads the value from the first line of standard input, which
keeps a secret out of the shell's history:

  nsys-cortex config set api.token - < token.txt

The environment variable of a key still overrides the file; set says so
when it does.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: configKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, value := args[0], args[1]
			k, err := config.Lookup(name)
			if err != nil {
				return err
			}
			if value == "-" {
				if value, err = a.readValueLine(); err != nil {
					return err
				}
			}
			path, err := configFile()
			if err != nil {
				return err
			}
			if err := config.Set(path, name, value); err != nil {
				return err
			}
			if os.Getenv(k.Env) != "" {
				fmt.Fprintf(a.Stderr, "note: %s is set in this environment and overrides the file\n", k.Env)
			}
			return nil
		},
	}
}

// readValueLine reads one line of standard input, without its line end.
func (a *App) readValueLine() (string, error) {
	if a.Stdin == nil {
		return "", errors.New("VALUE - reads standard input, and there is none")
	}
	line, err := bufio.NewReader(a.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("reading the value from standard input: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func (a *App) configUnsetCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "unset KEY",
		Short:             "Remove a key from the configuration file (its default applies again)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: configKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := configFile()
			if err != nil {
				return err
			}
			removed, err := config.Unset(path, args[0])
			if err != nil {
				return err
			}
			if !removed {
				fmt.Fprintf(a.Stderr, "note: %s was not set in %s\n", args[0], path)
			}
			if k, err := config.Lookup(args[0]); err == nil && os.Getenv(k.Env) != "" {
				fmt.Fprintf(a.Stderr, "note: %s is set in this environment and overrides the default\n", k.Env)
			}
			return nil
		},
	}
}

// loadConfig reads the config file of the home directory and fills the
// environment names of the keys it sets (never a secret's).
func (a *App) loadConfig() (*config.Config, error) {
	if a.cfg != nil {
		return a.cfg, nil
	}
	lay, err := layout.FromEnv()
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(lay.ConfigFile())
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Apply(); err != nil {
		return nil, err
	}
	if a.kubePortForward.set {
		// The flag, given, wins over the key's file and environment.
		os.Setenv("NSYS_CORTEX_KUBE_PORT_FORWARD", strconv.FormatBool(a.kubePortForward.val))
	}
	a.cfg = cfg
	return cfg, nil
}

// localToken returns the token in the home's api.token file; with create,
// a missing one is made (32 random bytes, hex, owner-only) first.
func localToken(lay layout.Layout, create bool) (string, error) {
	path := lay.APITokenFile()
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); len(t) >= 32 {
			return t, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the API token (%s): %w", path, err)
	}
	if !create {
		return "", nil
	}
	var raw [32]byte
	rand.Read(raw[:])
	t := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(lay.Home, 0o700); err != nil {
		return "", err
	}
	if err := store.WriteFileAtomic(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("the API token (%s): %w", path, err)
	}
	return t, nil
}
