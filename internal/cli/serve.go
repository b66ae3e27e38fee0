package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/config"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/logging"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

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
	a.cfg = cfg
	return cfg, nil
}

func (a *App) serveCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR]",
		Short: "Serve the HTTP API (default 127.0.0.1:3100)",
		Long: `Serve answers the HTTP API (api/openapi.yaml, docs/api.md) until SIGTERM or
SIGINT, then stops accepting, lets requests in flight finish (up to
api.shutdown_grace) and ends open streams. Neurons keep running and keep
their data; the daemon owns the neurons it touches, so other nsys-cortex
processes reach them through it (NSYS_CORTEX_API_URL or --api).

The daemon runs the home's keeper, which enforces deadlines and idle
rules (docs/lifecycle.md); a standalone one a CLI started gives way to it.

Every request needs the bearer token, on every address, loopback too:
a neuron with network full shares the host's network. Without api.token
(NSYS_CORTEX_API_TOKEN), serve makes one and keeps it in <home>/api.token
(owner-only), which the CLI of the same home reads by itself; other
clients send it as "Authorization: Bearer $(cat ~/.nsys-cortex/api.token)".
Its log is <home>/logs/cortex.log (nsys-cortex logs [-f]).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("listen") {
				if err := cfg.SetFlag("api.listen", listen); err != nil {
					return err
				}
			}
			addr, token := cfg.String("api.listen"), cfg.String("api.token")
			lay, err := layout.FromEnv()
			if err != nil {
				return err
			}
			tokenFrom := "api.token"
			if token == "" {
				if token, err = localToken(lay, true); err != nil {
					return err
				}
				tokenFrom = lay.APITokenFile()
			}
			levels, err := logging.ParseLevels(cfg.String("log.level"))
			if err != nil {
				return err
			}
			lopts := logging.Options{Dir: lay.LogsDir(), Levels: levels, MaxSize: cfg.Bytes("log.max_size"),
				MaxAge: cfg.Duration("log.max_age"), MaxFiles: cfg.Int("log.max_files")}
			if cfg.Bool("log.console") {
				lopts.Console = a.Stderr
			}
			logger, err := logging.New(lopts)
			if err != nil {
				return err
			}
			defer logger.Close()
			a.exclusive = true // the daemon owns what it touches
			set, err := a.sandboxes()
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listening on %s (api.listen): %w", addr, err)
			}
			if err := api.CheckListener(ln.Addr(), token); err != nil {
				ln.Close()
				return err
			}
			chat, err := a.serveChat(set, cfg)
			if err != nil {
				return err
			}
			srv := api.New(api.Options{Set: set, Version: a.Version, Token: token,
				MaxUpload: cfg.Bytes("api.max_upload"), Log: logger.For("api"), TermLocks: lay.TerminalLocksDir(),
				Chat: chat, Images: splitList(cfg.String("api.images")),
				Gate: &gate.Gate{Audit: launch.NewAudit(filepath.Join(lay.LogsDir(), "audit.log")), Layout: lay}})
			log := logger.For("serve")
			// The home's keeper runs in the daemon for as long as it serves.
			kctx, stopKeeper := context.WithCancel(cmd.Context())
			kept := make(chan struct{})
			go func() {
				defer close(kept)
				serveKeeper(kctx, lay, set, logger.For("keeper"))
			}()
			defer func() { stopKeeper(); <-kept }()
			log.Info("serving", "addr", ln.Addr().String(), "auth", token != "", "pid", os.Getpid(), "modes", set.Modes())
			fmt.Fprintf(a.Stderr, "nsys-cortex: serving the API on http://%s (token: %s; log: %s)\n", ln.Addr(), tokenFrom, logger.Path())
			err = srv.Serve(cmd.Context(), ln, cfg.Duration("api.shutdown_grace"))
			if err != nil && !errors.Is(err, context.Canceled) {
				log.Error("serve ended", "err", err)
				return err
			}
			stopKeeper()
			<-kept
			a.handOverKeeper(set, log)
			log.Info("stopped")
			fmt.Fprintln(a.Stderr, "nsys-cortex: stopped; the neurons keep running")
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", api.DefaultListen, "address to listen on (api.listen)")
	return cmd
}

// serveChat is what the daemon's sessions routes run: the chat's Host over
// the daemon's neurons, under the standard policy, and the chat settings of
// the configuration (llm.*, chat.*). Keys are read from the daemon's
// environment when a session starts, never from requests.
func (a *App) serveChat(set *sandbox.Set, cfg *config.Config) (*api.Chat, error) {
	host, err := a.newChatHost(set, &kitFlags{policy: "standard"})
	if err != nil {
		return nil, err
	}
	checkpoints := cfg.Int("chat.checkpoints")
	if checkpoints == 0 {
		checkpoints = -1 // chatrun: none
	}
	return &api.Chat{Host: host, Defaults: chatrun.Options{
		LLM: llm.Config{Provider: cfg.String("llm.provider"), Model: cfg.String("llm.model"),
			BaseURL: cfg.String("llm.base_url"), KeyEnv: cfg.String("llm.key_env")},
		MaxSteps: cfg.Int("chat.max_steps"), Window: cfg.Int("chat.context_window"), Checkpoints: checkpoints,
	}}, nil
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

// splitList splits a comma-separated setting, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
