//go:build !cortex_light

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// Exit statuses of a headless chat: the task finished, it hit a limit, it
// failed.
const (
	chatDone    = 0
	chatFailed  = 1
	chatLimited = 2
	chatCancel  = 130
)

// chatFlags are the chat command's own flags.
type chatFlags struct {
	kit                       kitFlags
	llm                       llm.Config
	prompt, output            string
	resume                    string
	cont                      bool
	maxSteps, window, reserve int
	checkpoints               int
	suggest                   bool
}

func (a *App) chatCommand() *cobra.Command {
	var f chatFlags
	cmd := &cobra.Command{
		Use:   "chat [ID] [--provider P --model M] [--resume SESSION|--continue] [-p PROMPT [-o json]]",
		Short: shortChat,
		Long: `chat runs the built-in agent loop: the model works in neuron ID (created if
it does not exist; the resumed session's neuron, or a new one, without ID)
through the tool kit, every call under the policy (--policy, default
standard). Sessions are kept as JSONL under <home>/sessions (--resume ID,
--continue for the latest).

Providers: anthropic, openai, gemini, and the OpenAI-compatible ollama,
vllm, lmstudio, sglang, grok, mistral (--base-url for others). The key is
read from the environment variable --key-env names (default per provider:
ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, ...); it is never stored.

Interactive: one request per line; the answer is rendered as markdown on
a terminal; Ctrl-C cancels the running turn (twice at the prompt exits).
Commands: /compact, /model [provider/]NAME, /rewind [N], /fork [N],
/sessions, /help, /exit. Before the first call of a turn that may change
files, the neuron's files are saved (a checkpoint; --checkpoints, default
20 per neuron): /rewind puts the conversation and the files back to
before a request. After each answer the model suggests a next request,
shown dimmed: Tab or Right takes it (--suggest=false turns it off).

Headless: -p PROMPT runs one turn; -o json prints one JSON event per line.
Exit status: 0 finished, 2 stopped at a limit (steps, time, output, loop),
1 failed, 130 cancelled.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				f.kit.neuron = args[0]
			}
			return a.chat(cmd, &f)
		},
	}
	f.kit.register(cmd)
	cmd.Flags().Lookup("neuron").Hidden = true // the argument is the way
	cmd.Flags().StringVar(&f.llm.Provider, "provider", "", "anthropic, openai, gemini, ollama, vllm, lmstudio, sglang, grok, mistral (config llm.provider)")
	cmd.Flags().StringVar(&f.llm.Model, "model", "", "the model (config llm.model)")
	cmd.Flags().StringVar(&f.llm.BaseURL, "base-url", "", "the API's base URL (OpenAI-compatible servers, proxies)")
	cmd.Flags().StringVar(&f.llm.KeyEnv, "key-env", "", "the environment variable holding the API key")
	cmd.Flags().StringVarP(&f.prompt, "prompt", "p", "", "run this one request and exit (headless)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "text", "text, or json: one event per line")
	cmd.Flags().StringVar(&f.resume, "resume", "", "continue session ID")
	cmd.Flags().BoolVar(&f.cont, "continue", false, "continue the most recent session")
	cmd.Flags().IntVar(&f.maxSteps, "max-steps", 50, "model calls per turn before stopping")
	cmd.Flags().IntVar(&f.window, "context-window", 200000, "the model's context window in tokens (compaction keeps the history within it)")
	cmd.Flags().IntVar(&f.reserve, "context-reserve", 0, "tokens kept free for the answer (default a fifth of the window)")
	cmd.Flags().IntVar(&f.checkpoints, "checkpoints", chatrun.DefaultCheckpoints, "checkpoints of the neuron's files kept for /rewind (0: none)")
	cmd.Flags().BoolVar(&f.suggest, "suggest", true, "suggest the next request as ghost text (interactive, on a terminal)")
	return cmd
}

// chat runs the chat command.
func (a *App) chat(cmd *cobra.Command, f *chatFlags) error {
	ctx, stop := chatContext(cmd.Context())
	defer stop()
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("-o %q: choose text or json", f.output)
	}
	if f.checkpoints < 0 {
		return fmt.Errorf("--checkpoints %d: give a count, 0 for none", f.checkpoints)
	}
	conf, err := a.loadConfig()
	if err != nil {
		return err
	}
	// Flags the operator did not give come from the configuration.
	for _, d := range []struct {
		flag, key string
		v         *int
	}{{"checkpoints", "chat.checkpoints", &f.checkpoints}, {"context-window", "chat.context_window", &f.window}, {"max-steps", "chat.max_steps", &f.maxSteps}} {
		if !cmd.Flags().Changed(d.flag) {
			*d.v = conf.Int(d.key)
		}
	}
	if !cmd.Flags().Changed("suggest") {
		f.suggest = conf.Bool("chat.suggestions")
	}
	explicit := cmd.Flags().Changed("provider") || cmd.Flags().Changed("model")
	for _, d := range []struct {
		v   *string
		key string
	}{{&f.llm.Provider, "llm.provider"}, {&f.llm.Model, "llm.model"}, {&f.llm.BaseURL, "llm.base_url"}, {&f.llm.KeyEnv, "llm.key_env"}} {
		if *d.v == "" {
			*d.v = conf.String(d.key) // flag > environment > config file
		}
	}
	if f.llm.Provider == "" || f.llm.Model == "" {
		return errors.New("chat: give --provider and --model (or set llm.provider and llm.model: nsys-cortex config set, NSYS_CORTEX_PROVIDER, NSYS_CORTEX_MODEL)")
	}
	host, err := a.chatHost(&f.kit)
	if err != nil {
		return err
	}
	checkpoints := f.checkpoints
	if checkpoints == 0 {
		checkpoints = -1 // chatrun: none
	}
	r, err := chatrun.Open(ctx, host, chatrun.Options{
		Neuron: f.kit.neuron, Agent: f.kit.agent,
		LLM: f.llm, FollowSession: !explicit,
		Resume: f.resume, Continue: f.cont, Title: firstLine(f.prompt, 80),
		MaxSteps: f.maxSteps, Window: f.window, Reserve: f.reserve,
		Checkpoints: checkpoints,
	})
	if err != nil {
		return err
	}
	defer r.Close()
	provider, model := r.Model()
	fmt.Fprintf(a.Stderr, "nsys-cortex: session %s, neuron %s, %s/%s, policy %s\n", r.ID(), r.Neuron(), provider, model, r.Policy())
	if f.prompt != "" {
		var view func(chatrun.Event)
		if f.output == "json" {
			view = a.jsonEvents()
		} else {
			v := a.newChatView(false)
			defer v.close()
			view = v.event
		}
		res, err := a.chatTurn(ctx, r, f.prompt, view)
		if err != nil {
			return interrupted(ctx, err)
		}
		return interrupted(ctx, &exitError{code: exitFor(res.TurnResult)})
	}
	return interrupted(ctx, a.interactive(ctx, r, f))
}

// chatContext is a chat's context. Ctrl-C (SIGINT) cancels the running
// turn, not the chat, so the chat does not end with the command's context
// (which SIGINT cancels); SIGTERM and SIGHUP end it.
func chatContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case s := <-sigs:
			cancel(SignalCause{Signal: s.(syscall.Signal)})
		case <-done:
		}
	})
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
		cancel(nil)
	}
}

// chatHost is what chat Runners need of this command line: the neurons,
// creating them as create does, and the kit's policy, redaction and audit.
func (a *App) chatHost(f *kitFlags) (*chatrun.Host, error) {
	if api, err := a.apiClient(); err != nil {
		return nil, err
	} else if api != nil {
		return nil, errors.New("chat runs beside the neurons (their channel, the audit log, memory and sessions are on that host): run it there without --api / NSYS_CORTEX_API_URL")
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, err
	}
	return a.newChatHost(set, f)
}

// newChatHost is the chat Host over set: what chat and serve share.
func (a *App) newChatHost(set *sandbox.Set, f *kitFlags) (*chatrun.Host, error) {
	p, err := loadPolicy(f.policy)
	if err != nil {
		return nil, err
	}
	red, err := redactor(f.secretEnv)
	if err != nil {
		return nil, err
	}
	return &chatrun.Host{
		Set: set, Layout: a.lay,
		Ensure: func(ctx context.Context, id string) (string, error) {
			return a.ensureNeuron(ctx, set, id)
		},
		Policy: p, Redactor: red,
		Audit: launch.NewAudit(filepath.Join(a.lay.LogsDir(), "audit.log")),
	}, nil
}

// ensureNeuron returns the id of neuron id (a unique prefix will do) once
// it runs, creating it (a new one when id is "") when it does not.
func (a *App) ensureNeuron(ctx context.Context, set *sandbox.Set, id string) (string, error) {
	if id != "" {
		if _, st, err := set.Find(ctx, id); err == nil && (st.Status == sandbox.StatusRunning || st.Status == sandbox.StatusPaused) {
			return st.ID, nil
		}
		if err := ids.Validate(id); err != nil {
			return "", err
		}
	} else {
		id = ids.New()
	}
	st, why, err := a.create(ctx, set, id, "", sandbox.CreateOptions{})
	var ar *sandbox.AlreadyRunningError
	if errors.As(err, &ar) {
		return id, nil
	}
	if err != nil {
		return "", err
	}
	fmt.Fprintf(a.Stderr, "nsys-cortex: created neuron %s (mode %s: %s)\n", st.ID, st.Mode, why)
	return st.ID, nil
}

// jsonEvents prints each event as one JSON line.
func (a *App) jsonEvents() func(chatrun.Event) {
	var mu sync.Mutex
	return func(e chatrun.Event) {
		rec, ok := chatrun.Record(e)
		if !ok {
			return
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return // a record of strings and numbers always encodes
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(a.Stdout, string(b))
	}
}

// chatTurn runs one request; SIGINT (Ctrl-C) and SIGTERM cancel the turn,
// not the chat.
func (a *App) chatTurn(ctx context.Context, r *chatrun.Runner, request string, view func(chatrun.Event)) (*chatrun.TurnResult, error) {
	var (
		res *chatrun.TurnResult
		err error
	)
	interruptible(ctx, func(ctx context.Context) { res, err = r.Turn(ctx, request, view) })
	if err != nil {
		return nil, err
	}
	if res.SessionErr != nil {
		fmt.Fprintf(a.Stderr, "nsys-cortex: the session could not be written: %v\n", res.SessionErr)
	}
	return res, nil
}

// interruptible runs f with a context that SIGINT and SIGTERM cancel: they
// end what f does, not the program.
func interruptible(ctx context.Context, f func(context.Context)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-sig:
			cancel()
		case <-done:
		}
	})
	f(ctx)
	close(done)
	wg.Wait()
}

// exitFor maps how a headless turn ended to the exit status.
func exitFor(r *loop.TurnResult) int {
	switch r.Stop {
	case loop.StopDone:
		return chatDone
	case loop.StopSteps, loop.StopTime, loop.StopMaxTokens, loop.StopLoop:
		return chatLimited
	case loop.StopCancelled:
		return chatCancel
	}
	return chatFailed
}
