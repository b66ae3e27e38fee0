//go:build !cortex_light

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/config"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/keeper"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/logging"
	"github.com/nsys-cortex/cortex/internal/portsign"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/pool"
)

func (a *App) serveCommand() *cobra.Command {
	var listen, domain string
	var pools []string
	var e2b bool
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--pool MODE=N]",
		Short: shortServe,
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
Its log is <home>/logs/cortex.log (nsys-cortex logs [-f]).

--pool nsbox=8 (config key pool) keeps 8 nsbox neurons booted ahead and
unnamed: a create of a new id with options they can give claims one in a
millisecond or two, and the pool refills behind it. Warm neurons never
appear in list, and serve removes those left unclaimed when it stops
(docs/pool.md).

--e2b also answers E2B's API, so that code written against E2B's SDKs runs
on Cortex's neurons unchanged: E2B_API_URL=http://HOST/e2b,
E2B_SANDBOX_URL=http://HOST/e2b/sandbox and E2B_API_KEY from nsys-cortex
token create --e2b NAME (docs/e2b.md).`,
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
			if cmd.Flags().Changed("domain") {
				if err := cfg.SetFlag("api.domain", domain); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("pool") {
				if err := cfg.SetFlag("pool", strings.Join(pools, ",")); err != nil {
					return err
				}
			}
			poolSpecs, err := pool.ParseSpecs([]string{cfg.String("pool")})
			if err != nil {
				return err
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
			urlKey, err := portsign.LoadKey(lay.URLKeyFile())
			if err != nil {
				return fmt.Errorf("the key that signs port URLs: %w", err)
			}
			keys, err := a.keyStore(cmd.Context(), lay)
			if err != nil {
				return err
			}
			if _, err := keys.List(); err != nil {
				return err // a key file that cannot be read is refused now, not at the first request
			}
			pool.Sweep(cmd.Context(), set, logger.For("pool"))
			warm, err := pool.Start(set, poolSpecs, logger.For("pool"))
			if err != nil {
				return err
			}
			defer warm.Close()
			audit := launch.NewAudit(filepath.Join(lay.LogsDir(), "audit.log"))
			if lopts.Console != nil {
				audit.MirrorTo(a.Stderr) // the facts in the log a cluster keeps
				defer audit.Close()
			}
			srv := api.New(api.Options{Set: set, Version: a.Version, Token: token, Pools: warm,
				MaxUpload: cfg.Bytes("api.max_upload"), Log: logger.For("api"), TermLocks: lay.TerminalLocksDir(),
				Chat: chat, Images: splitList(cfg.String("api.images")), Domain: cfg.String("api.domain"), URLKey: urlKey,
				E2B: e2b, Keys: keys, KeyLimits: api.KeyLimits{Rate: float64(cfg.Int("api.key_rate")), Neurons: cfg.Int("api.key_neurons")},
				Gate: &gate.Gate{Audit: audit, Layout: lay}})
			defer keys.Flush()
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
			if err := warm.Close(); err != nil {
				log.Warn("removing the pools' warm neurons", "err", err)
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
	cmd.Flags().StringVar(&domain, "domain", "", "route <port>-<id>.DOMAIN to port of neuron id (api.domain; docs/ports.md)")
	cmd.Flags().BoolVar(&e2b, "e2b", false, "also answer E2B's API: its control plane under /e2b, its sandboxes under /e2b/sandbox (docs/e2b.md)")
	cmd.Flags().StringArrayVar(&pools, "pool", nil, "keep N warm neurons of MODE booted ahead, e.g. nsbox=8 (pool; docs/pool.md)")
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
	chat := &api.Chat{Host: host, Defaults: chatrun.Options{
		LLM: llm.Config{Provider: cfg.String("llm.provider"), Model: cfg.String("llm.model"),
			BaseURL: cfg.String("llm.base_url"), KeyEnv: cfg.String("llm.key_env")},
		MaxSteps: cfg.Int("chat.max_steps"), Window: cfg.Int("chat.context_window"), Checkpoints: checkpoints,
	}}
	// kube.chat_sessions: the sessions in the cluster, for every replica.
	store, err := kube.SecretSessionsFromEnv()
	if err != nil {
		return nil, err
	}
	if store != nil {
		chat.Store = store
	}
	return chat, nil
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

// serveKeeper runs the daemon's keeper until ctx ends: the home's one,
// for as long as serve runs. While a standalone keeper holds the home it
// asks it to give way and tries again every second.
func serveKeeper(ctx context.Context, lay layout.Layout, set *sandbox.Set, log *slog.Logger) {
	k := keeper.New(lay, set, keeper.Options{Log: log})
	asked := false
	for {
		err := k.Run(ctx)
		if !errors.Is(err, keeper.ErrRunning) {
			if err != nil {
				log.Error("keeper ended", "err", err)
			}
			return
		}
		if !asked {
			log.Info("a standalone keeper holds the home: asking it to give way")
			asked = true
		}
		now := time.Now()
		if err := os.Chtimes(yieldFile(lay), now, now); errors.Is(err, os.ErrNotExist) {
			if f, err := os.OpenFile(yieldFile(lay), os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
				f.Close()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// handOverKeeper is the daemon's last act: when it stops while neurons
// have a deadline or an idle rule, it lets go of them and starts a
// standalone keeper, so those hold without it too.
func (a *App) handOverKeeper(set *sandbox.Set, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sts, err := set.List(ctx)
	if err != nil {
		log.Warn("listing the neurons for a keeper to take over", "err", err)
		return
	}
	watched := false
	for _, st := range sts {
		live := st.Status == sandbox.StatusRunning || st.Status == sandbox.StatusPaused
		watched = watched || live && (st.Deadline != nil || st.AutoPause > 0)
	}
	if !watched {
		return
	}
	set.Close() // a keeper must be able to own them: let go first
	a.keeper.mu.Lock()
	defer a.keeper.mu.Unlock()
	if err := a.startKeeper(); err != nil {
		log.Warn("could not start a keeper to take over; deadlines apply when a command next looks", "err", err)
		return
	}
	log.Info("a standalone keeper takes over the deadlines and idle rules", "log", keeperLog(a.lay))
}
