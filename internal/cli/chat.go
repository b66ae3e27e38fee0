package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/providers"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/prompt"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// Exit statuses of a headless chat: the task finished, it hit a limit, it
// failed.
const (
	chatDone    = 0
	chatFailed  = 1
	chatLimited = 2
	chatCancel  = 130
)

func (a *App) chatCommand() *cobra.Command {
	var (
		f                         kitFlags
		cfg                       llm.Config
		promptText, output        string
		resume                    string
		cont                      bool
		maxSteps, window, reserve int
	)
	cmd := &cobra.Command{
		Use:   "chat [ID] [--provider P --model M] [--resume SESSION|--continue] [-p PROMPT [-o json]]",
		Short: "Talk to an LLM agent that works in a neuron with the tool kit",
		Long: `chat runs the built-in agent loop: the model works in neuron ID (created if
it does not exist; a new one without ID) through the tool kit, every call
under the policy (--policy, default standard). Sessions are kept as JSONL
under <home>/sessions (--resume ID, --continue for the latest).

Providers: anthropic, openai, gemini, and the OpenAI-compatible ollama,
vllm, lmstudio, sglang, grok, mistral (--base-url for others). The key is
read from the environment variable --key-env names (default per provider:
ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, ...); it is never stored.

Interactive: one request per line; Ctrl-C cancels the running turn (a
second Ctrl-C at the prompt exits); /compact, /model NAME, /sessions, /exit.
Headless: -p PROMPT runs one turn; -o json prints one JSON event per line.
Exit status: 0 finished, 2 stopped at a limit (steps, time, output, loop),
1 failed, 130 cancelled.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			if len(args) == 1 {
				f.neuron = args[0]
			}
			conf, err := a.loadConfig()
			if err != nil {
				return err
			}
			for _, d := range []struct {
				v   *string
				key string
			}{{&cfg.Provider, "llm.provider"}, {&cfg.Model, "llm.model"}, {&cfg.BaseURL, "llm.base_url"}, {&cfg.KeyEnv, "llm.key_env"}} {
				if *d.v == "" {
					*d.v = conf.String(d.key) // flag > environment > config file
				}
			}
			if cfg.Provider == "" || cfg.Model == "" {
				return errors.New("chat: give --provider and --model (or set llm.provider and llm.model: nsys-cortex config set, NSYS_CORTEX_PROVIDER, NSYS_CORTEX_MODEL)")
			}
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: choose text or json", output)
			}
			prov, err := providers.New(cfg)
			if err != nil {
				return err
			}
			if err := a.ensureNeuron(ctx, &f); err != nil {
				return err
			}
			kit, err := a.kit(ctx, &f)
			if err != nil {
				return err
			}
			sess, err := a.chatSession(resume, cont, &f, cfg)
			if err != nil {
				return err
			}
			defer sess.Close()
			c := &chat{app: a, sess: sess, json: output == "json", provider: cfg.Provider, model: cfg.Model}
			// Other agents this one starts (sessions_spawn) get the same
			// provider and policy, a neuron and session of their own, and
			// no sessions tools (one level of delegation).
			router := &loop.Router{
				Sessions: session.ForLayout(a.lay),
				Header:   session.Header{Provider: cfg.Provider, Model: cfg.Model, Agent: f.agent},
				Start: func(ctx context.Context, neuron string, sub *session.Session) (*loop.Agent, string, error) {
					sf := f
					sf.neuron = neuron
					if err := a.ensureNeuron(ctx, &sf); err != nil {
						return nil, "", err
					}
					kit, err := a.kit(ctx, &sf)
					if err != nil {
						return nil, "", err
					}
					system, err := a.systemPrompt(ctx, kit, &sf)
					if err != nil {
						return nil, "", err
					}
					agent, err := loop.New(loop.Config{Provider: prov, Model: cfg.Model, Kit: kit, System: system, MaxSteps: maxSteps,
						Budget:    loop.Budget{Window: window, Reserve: reserve},
						OnMessage: func(m llm.Message) { _, _ = sub.AppendMessage(m) }, // best effort: the parent sees the answer either way
					})
					return agent, sf.neuron, err
				},
			}
			defer router.Close()
			sessionTools, err := router.Tools()
			if err != nil {
				return err
			}
			for _, t := range sessionTools {
				if err := kit.Add(t); err != nil {
					return err
				}
			}
			system, err := a.systemPrompt(ctx, kit, &f)
			if err != nil {
				return err
			}
			agent, err := loop.New(loop.Config{
				Provider: prov, Model: cfg.Model, Kit: kit, System: system, MaxSteps: maxSteps,
				Budget:       loop.Budget{Window: window, Reserve: reserve},
				OnEvent:      c.event,
				OnMessage:    c.message,
				OnCompaction: c.compaction,
			})
			if err != nil {
				return err
			}
			history := sess.Messages()
			agent.SetHistory(history)
			for range history {
				c.ids = append(c.ids, "") // entries of a resumed session: compaction keeps their place
			}
			fmt.Fprintf(a.Stderr, "nsys-cortex: session %s, neuron %s, %s/%s, policy %s\n", sess.ID(), f.neuron, cfg.Provider, cfg.Model, kit.Policy().Name)
			if promptText != "" {
				r := c.turn(ctx, agent, promptText)
				return &exitError{code: exitFor(r)}
			}
			return c.interactive(ctx, agent, prov)
		},
	}
	f.register(cmd)
	cmd.Flags().Lookup("neuron").Hidden = true // the argument is the way
	cmd.Flags().StringVar(&cfg.Provider, "provider", "", "anthropic, openai, gemini, ollama, vllm, lmstudio, sglang, grok, mistral (config llm.provider)")
	cmd.Flags().StringVar(&cfg.Model, "model", "", "the model (config llm.model)")
	cmd.Flags().StringVar(&cfg.BaseURL, "base-url", "", "the API's base URL (OpenAI-compatible servers, proxies)")
	cmd.Flags().StringVar(&cfg.KeyEnv, "key-env", "", "the environment variable holding the API key")
	cmd.Flags().StringVarP(&promptText, "prompt", "p", "", "run this one request and exit (headless)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, or json: one event per line")
	cmd.Flags().StringVar(&resume, "resume", "", "continue session ID")
	cmd.Flags().BoolVar(&cont, "continue", false, "continue the most recent session")
	cmd.Flags().IntVar(&maxSteps, "max-steps", 50, "model calls per turn before stopping")
	cmd.Flags().IntVar(&window, "context-window", 200000, "the model's context window in tokens (compaction keeps the history within it)")
	cmd.Flags().IntVar(&reserve, "context-reserve", 0, "tokens kept free for the answer (default a fifth of the window)")
	return cmd
}

// ensureNeuron uses neuron f.neuron, creating it (or a new one) when it is
// not running.
func (a *App) ensureNeuron(ctx context.Context, f *kitFlags) error {
	set, err := a.sandboxes()
	if err != nil {
		return err
	}
	if f.neuron != "" {
		if _, st, err := set.Find(ctx, f.neuron); err == nil && st.Status == sandbox.StatusRunning {
			f.neuron = st.ID
			return nil
		}
		if err := ids.Validate(f.neuron); err != nil {
			return err
		}
	} else {
		f.neuron = ids.New()
	}
	st, why, err := a.create(ctx, set, f.neuron, "", sandbox.CreateOptions{})
	var ar *sandbox.AlreadyRunningError
	if errors.As(err, &ar) {
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "nsys-cortex: created neuron %s (mode %s: %s)\n", st.ID, st.Mode, why)
	return nil
}

// chatSession opens or creates the session.
func (a *App) chatSession(resume string, cont bool, f *kitFlags, cfg llm.Config) (*session.Session, error) {
	m := session.ForLayout(a.lay)
	switch {
	case resume != "" && cont:
		return nil, errors.New("--resume and --continue contradict each other")
	case resume != "":
		return m.Open(resume)
	case cont:
		return m.Continue()
	}
	return m.Create(session.Header{Neuron: f.neuron, Provider: cfg.Provider, Model: cfg.Model, Agent: f.agent})
}

// systemPrompt builds the system prompt from the agent's files and the
// neuron's workspace.
func (a *App) systemPrompt(ctx context.Context, kit *tools.Kit, f *kitFlags) (string, error) {
	set, err := a.sandboxes()
	if err != nil {
		return "", err
	}
	n := tools.NewSetNeuron(set, a.lay, f.neuron)
	st, err := n.State(ctx)
	if err != nil {
		return "", err
	}
	agent := f.agent
	if agent == "" {
		agent = "default"
	}
	var list []prompt.Tool
	for _, t := range kit.Tools() {
		list = append(list, prompt.Tool{Name: t.Name, Description: t.Description})
	}
	facts := prompt.Facts{Neuron: st.ID, Mode: st.Mode, Workdir: st.Workdir, Policy: kit.Policy().Name}
	if p := st.Policy; p != nil {
		facts.Network = string(p.Network.Mode)
		if facts.Network == "" {
			facts.Network = "none"
		}
		if len(p.Network.Allow) > 0 {
			facts.Network += " (" + strings.Join(p.Network.Allow, ", ") + ")"
		}
		var lim []string
		if p.Limits.MemoryBytes > 0 {
			lim = append(lim, fmt.Sprintf("memory %d MiB", p.Limits.MemoryBytes>>20))
		}
		if p.Limits.Pids > 0 {
			lim = append(lim, fmt.Sprintf("%d processes", p.Limits.Pids))
		}
		if p.Limits.CPUs > 0 {
			lim = append(lim, fmt.Sprintf("%.1f CPUs", p.Limits.CPUs))
		}
		facts.Limits = strings.Join(lim, ", ")
	}
	return prompt.Build(ctx, prompt.Options{
		GlobalDir: filepath.Join(a.lay.Home, "agents", agent),
		Workspace: func(ctx context.Context, name string) ([]byte, error) {
			cl, err := n.Client(ctx)
			if err != nil {
				return nil, err
			}
			data, err := cl.ReadFile(ctx, path.Join(st.Workdir, name))
			if protocol.HasCode(err, protocol.CodeNotFound) {
				return nil, fs.ErrNotExist
			}
			return data, err
		},
		Tools: list,
		Facts: facts,
	})
}

// chat is one chat's output and session writing.
type chat struct {
	app             *App
	sess            *session.Session
	json            bool
	provider, model string

	mu       sync.Mutex
	ids      []string // the session entry of each message of the agent's history
	midLine  bool
	writeErr error
}

// event shows what happens: text as it streams, tool calls compactly.
func (c *chat) event(e loop.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.json {
		c.emitJSON(e)
		return
	}
	out, errw := c.app.Stdout, c.app.Stderr
	switch e.Kind {
	case loop.EventModel:
		if e.Model.Kind == llm.EventText {
			fmt.Fprint(out, e.Model.Text)
			c.midLine = !strings.HasSuffix(e.Model.Text, "\n")
		}
	case loop.EventToolStart:
		c.endLine()
		fmt.Fprintf(errw, "  → %s %s\n", e.Call.Name, summarise(string(e.Call.Input), 100))
	case loop.EventToolResult:
		mark := "✓"
		if e.Result.IsError {
			mark = "✗"
		}
		first, _, _ := strings.Cut(strings.TrimSpace(e.Result.Text), "\n")
		fmt.Fprintf(errw, "    %s %s\n", mark, summarise(first, 120))
	case loop.EventLoop:
		c.endLine()
		fmt.Fprintf(errw, "  ! loop detector (%s, %s): %s\n", e.Finding.Pattern, e.Finding.Verdict, e.Finding.Message)
	case loop.EventCompaction:
		c.endLine()
		fmt.Fprintf(errw, "  … %s\n", e.Text)
	case loop.EventTurnEnd:
		c.endLine()
		if e.Stop != loop.StopDone {
			fmt.Fprintf(errw, "[%s] %s\n", e.Stop, e.Text)
		}
	}
}

func (c *chat) endLine() {
	if c.midLine {
		fmt.Fprintln(c.app.Stdout)
		c.midLine = false
	}
}

// emitJSON prints one event as a JSON line.
func (c *chat) emitJSON(e loop.Event) {
	rec := map[string]any{"type": string(e.Kind)}
	switch e.Kind {
	case loop.EventModel:
		if e.Model.Kind != llm.EventText {
			return // pieces of tool input and thinking: the tool_start event carries the whole call
		}
		rec["type"], rec["text"] = "text", e.Model.Text
	case loop.EventToolStart:
		rec["tool"], rec["id"], rec["input"] = e.Call.Name, e.Call.ID, e.Call.Input
	case loop.EventToolResult:
		rec["tool"], rec["id"], rec["isError"], rec["output"] = e.Call.Name, e.Call.ID, e.Result.IsError, e.Result.Text
	case loop.EventLoop:
		rec["pattern"], rec["verdict"], rec["message"] = e.Finding.Pattern, e.Finding.Verdict.String(), e.Finding.Message
	case loop.EventCompaction:
		rec["what"] = e.Text
	case loop.EventTurnEnd:
		rec["stop"], rec["message"] = string(e.Stop), e.Text
	}
	b, _ := json.Marshal(rec)
	fmt.Fprintln(c.app.Stdout, string(b))
}

// message appends a message to the session.
func (c *chat) message(m llm.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.sess.AppendMessage(m)
	if err != nil {
		c.writeErr = err
		c.ids = append(c.ids, "")
		return
	}
	c.ids = append(c.ids, e.ID)
}

// compaction records a compaction in the session.
func (c *chat) compaction(summary string, kept int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := ""
	if kept > 0 && kept <= len(c.ids) {
		first = c.ids[len(c.ids)-kept]
	}
	if _, err := c.sess.AppendCompaction(session.Compaction{Summary: summary, FirstKeptID: first}); err != nil {
		c.writeErr = err
	}
	c.ids = append([]string{""}, c.ids[len(c.ids)-kept:]...)
}

// turn runs one request; Ctrl-C cancels it.
func (c *chat) turn(ctx context.Context, agent *loop.Agent, request string) *loop.TurnResult {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-sig:
			cancel()
		case <-done:
		}
	}()
	r := agent.Turn(tctx, request)
	close(done)
	wg.Wait()
	if c.writeErr != nil {
		fmt.Fprintf(c.app.Stderr, "nsys-cortex: the session could not be written: %v\n", c.writeErr)
	}
	return r
}

// interactive reads requests until /exit or end of input.
func (c *chat) interactive(ctx context.Context, agent *loop.Agent, prov llm.Provider) error {
	in := bufio.NewScanner(c.app.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for {
		fmt.Fprint(c.app.Stderr, "› ")
		if !in.Scan() {
			fmt.Fprintln(c.app.Stderr)
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		switch {
		case line == "":
			continue
		case line == "/exit" || line == "/quit":
			return nil
		case line == "/sessions":
			list, err := session.ForLayout(c.app.lay).List()
			if err != nil {
				return err
			}
			for _, s := range list {
				fmt.Fprintf(c.app.Stdout, "%s  %s  %d entries  %s\n", s.ID, s.Modified.Format("2006-01-02 15:04"), s.Entries, s.Title)
			}
			continue
		case strings.HasPrefix(line, "/model"):
			fmt.Fprintln(c.app.Stderr, "switching models inside a chat is not built yet: start it again with --resume "+c.sess.ID()+" --model NAME")
			continue
		case line == "/compact":
			fmt.Fprintln(c.app.Stderr, "compaction runs when the history nears the context window (--context-window)")
			continue
		case strings.HasPrefix(line, "/"):
			fmt.Fprintf(c.app.Stderr, "unknown command %s: /sessions, /exit\n", line)
			continue
		}
		c.turn(ctx, agent, line)
	}
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

func summarise(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
