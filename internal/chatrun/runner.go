package chatrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/providers"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// DefaultCheckpoints is how many checkpoints a neuron keeps unless told
// otherwise (Options.Checkpoints).
const DefaultCheckpoints = 20

// Errors a caller acts on.
var (
	// ErrBusy: another operation (a turn, a compaction, a rewind, ...) of
	// this Runner is running. Runners never queue.
	ErrBusy = errdefs.New(errdefs.Busy, "the chat is busy with another request")
	// ErrClosed: the Runner was closed.
	ErrClosed = errdefs.New(errdefs.Unavailable, "the chat is closed")
)

// Options shape one Runner.
type Options struct {
	// Neuron is the neuron the agent works in: created when it does not
	// run; "" is the resumed session's neuron, or a new one.
	Neuron string
	// Agent names the agent: its memory store and audit facts (default the
	// neuron's id) and its prompt files, <home>/agents/<agent>/ (default
	// "default").
	Agent string
	// LLM is the provider and model. On a resumed session whose model was
	// switched (a model_change entry), FollowSession takes the session's.
	LLM           llm.Config
	FollowSession bool
	// Resume opens session Resume; Continue the most recent one; neither
	// creates a new session titled Title.
	Resume   string
	Continue bool
	Title    string
	// MaxSteps, TimeLimit and MaxOutputTokens bound a turn (loop.Config).
	MaxSteps        int
	TimeLimit       time.Duration
	MaxOutputTokens int
	// Window is the model's context window in tokens (0: never compact);
	// Reserve is kept free for the answer (0: a fifth of the window).
	Window, Reserve int
	// Checkpoints is how many checkpoints the neuron keeps (0:
	// DefaultCheckpoints); negative takes none, and a rewind then cannot
	// put files back.
	Checkpoints int
	// NoSessionTools leaves out sessions_spawn, sessions_send, ... (the
	// agents those start never get them: one level of delegation).
	NoSessionTools bool
	// AcquireRouted, when set, is the sessions_send tool's
	// loop.Router.Acquire (a daemon whose sessions other replicas share
	// holds each session its agent writes to).
	AcquireRouted func(ctx context.Context, id string, open bool) error
	// DisableLoopDetection turns the loop detector off.
	DisableLoopDetection bool
}

// Event is one thing that happened: a loop event (text as it streams, tool
// calls and results, loop findings, compactions, the end of a turn), or a
// checkpoint (Kind EventCheckpoint, Checkpoint set).
type Event struct {
	loop.Event
	Checkpoint *Checkpoint
}

// EventCheckpoint is the kind of the event reporting a checkpoint.
const EventCheckpoint loop.EventKind = "checkpoint"

// TurnResult is how a turn ended.
type TurnResult struct {
	*loop.TurnResult
	// Checkpoint is the checkpoint taken before the turn's first change
	// (nil: the turn changed nothing, or checkpoints are off).
	Checkpoint *Checkpoint
	// SessionErr is the first failure writing the session during the
	// turn: the turn ran, but the file misses entries.
	SessionErr error
}

// Runner is one chat session. Its methods are safe for concurrent use;
// Turn, Compact, SetModel, Fork and Rewind run one at a time (ErrBusy).
type Runner struct {
	host *Host
	opts Options
	mem  memories
	// busy is held by the operation running; the loop's callbacks run on
	// its goroutine, so onEvent, writeErr and the turn's checkpoint are
	// touched only by the holder.
	busy       sync.Mutex
	onEvent    func(Event)
	writeErr   error
	checkpoint *Checkpoint
	noted      bool // this turn took (or tried) its checkpoint

	mu       sync.Mutex // guards what follows against readers that do not hold busy
	sess     *session.Session
	neuron   *tools.SetNeuron
	kit      *tools.Kit
	extra    []*tools.Tool // the sessions tools, added to every kit
	agent    *loop.Agent
	router   *loop.Router
	llmCfg   llm.Config
	provider llm.Provider
	ids      []string // the session entry of each message of the agent's history
	closed   bool
}

// Open opens (Resume, Continue) or creates a session and readies its
// agent in its neuron.
func Open(ctx context.Context, h *Host, o Options) (_ *Runner, err error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	if err := CheckAgent(o.Agent); err != nil {
		return nil, err
	}
	if o.Resume != "" && o.Continue {
		return nil, errors.New("resume a named session or continue the latest, not both")
	}
	if o.Checkpoints == 0 {
		o.Checkpoints = DefaultCheckpoints
	}
	mgr := session.ForLayout(h.Layout)
	var sess *session.Session
	switch {
	case o.Resume != "":
		sess, err = mgr.Open(o.Resume)
	case o.Continue:
		sess, err = mgr.Continue()
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && sess != nil {
			sess.Close()
		}
	}()
	neuron := o.Neuron
	cfg := o.LLM
	if sess != nil {
		if neuron == "" {
			neuron = sess.Header().Neuron
		}
		if p, m := sess.Model(); o.FollowSession && p != "" && m != "" {
			cfg = switched(cfg, p, m)
		}
	}
	prov, err := h.provider(cfg)
	if err != nil {
		return nil, err
	}
	if neuron, err = h.Ensure(ctx, neuron); err != nil {
		return nil, err
	}
	if sess == nil {
		sess, err = mgr.Create(session.Header{Neuron: neuron, Provider: cfg.Provider, Model: cfg.Model, Agent: o.Agent, Title: o.Title})
		if err != nil {
			return nil, err
		}
	}
	r := &Runner{host: h, opts: o, sess: sess, llmCfg: cfg, provider: prov,
		neuron: tools.NewSetNeuron(h.Set, h.Layout, neuron)}
	defer func() {
		if err != nil {
			sess = nil // closed below with the rest
			r.close()
		}
	}()
	if !o.NoSessionTools {
		r.router = &loop.Router{
			Sessions: mgr,
			Acquire:  o.AcquireRouted,
			Self:     r.ID,
			Header:   session.Header{Provider: cfg.Provider, Model: cfg.Model, Agent: o.Agent},
			Start:    r.startAgent,
		}
		if r.extra, err = r.router.Tools(); err != nil {
			return nil, err
		}
	}
	if r.kit, err = h.newKit(r.neuron, o.Agent, &r.mem, r.extra); err != nil {
		return nil, err
	}
	system, err := h.systemPrompt(ctx, r.neuron, r.kit, o.Agent)
	if err != nil {
		return nil, err
	}
	budget := loop.Budget{Window: o.Window, Reserve: o.Reserve}
	if c, ok := prov.(llm.TokenCounter); ok {
		budget.Counter = c
	}
	r.agent, err = loop.New(loop.Config{
		Provider: prov, Model: cfg.Model, Kit: kitView{r}, System: system,
		MaxSteps: o.MaxSteps, TimeLimit: o.TimeLimit, MaxOutputTokens: o.MaxOutputTokens,
		Budget:               budget,
		DisableLoopDetection: o.DisableLoopDetection,
		OnEvent:              r.event,
		OnMessage:            r.message,
		OnCompaction:         r.compaction,
	})
	if err != nil {
		return nil, err
	}
	r.reload()
	return r, nil
}

// switched is cfg for provider/model: the base URL and key variable are
// kept only for the same provider (another vendor's URL means nothing).
func switched(cfg llm.Config, provider, model string) llm.Config {
	if provider != cfg.Provider {
		cfg = llm.Config{Provider: provider, MaxRetries: cfg.MaxRetries, Timeout: cfg.Timeout}
	}
	cfg.Model = model
	return cfg
}

// startAgent starts an agent for the router (sessions_spawn/send): in its
// own neuron, with the chat's current model and policy, no sessions tools,
// no checkpoints, its messages written to its own session.
func (r *Runner) startAgent(ctx context.Context, neuron string, sub *session.Session) (*loop.Agent, string, error) {
	id, err := r.host.Ensure(ctx, neuron)
	if err != nil {
		return nil, "", err
	}
	n := tools.NewSetNeuron(r.host.Set, r.host.Layout, id)
	kit, err := r.host.newKit(n, r.opts.Agent, &r.mem, nil)
	if err != nil {
		return nil, "", err
	}
	system, err := r.host.systemPrompt(ctx, n, kit, r.opts.Agent)
	if err != nil {
		return nil, "", err
	}
	p, model := r.agent.Model()
	agent, err := loop.New(loop.Config{Provider: p, Model: model, Kit: kit, System: system,
		MaxSteps: r.opts.MaxSteps, TimeLimit: r.opts.TimeLimit, MaxOutputTokens: r.opts.MaxOutputTokens,
		Budget:    loop.Budget{Window: r.opts.Window, Reserve: r.opts.Reserve},
		OnMessage: func(m llm.Message) { _, _ = sub.AppendMessage(m) }, // best effort: the parent gets the answer either way
	})
	return agent, id, err
}

// ID returns the session's id (it changes with Fork).
func (r *Runner) ID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess.ID()
}

// Stale reports whether the session's file changed since the runner last
// read or wrote it (session.Session.Stale): open it again before a
// change.
func (r *Runner) Stale() bool {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	return sess == nil || sess.Stale()
}

// Routed returns the ids of the sessions the agents this session's agent
// started or talked to work in (the sessions_* tools).
func (r *Runner) Routed() []string {
	r.mu.Lock()
	router := r.router
	r.mu.Unlock()
	if router == nil {
		return nil
	}
	return router.Routed()
}

// Neuron returns the id of the neuron the agent works in.
func (r *Runner) Neuron() string { return r.neuron.ID() }

// Model returns the provider and model in use.
func (r *Runner) Model() (provider, model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.llmCfg.Provider, r.llmCfg.Model
}

// Policy names the policy the tool calls run under.
func (r *Runner) Policy() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kit.Policy().Name
}

// Messages returns the conversation as the model sees it next.
func (r *Runner) Messages() []llm.Message {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	return sess.Messages()
}

// Session returns the open session (it changes with Fork). Appending to it
// is the Runner's job.
func (r *Runner) Session() *session.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess
}

// acquire takes busy for one operation.
func (r *Runner) acquire() error {
	if !r.busy.TryLock() {
		return ErrBusy
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		r.busy.Unlock()
		return ErrClosed
	}
	return nil
}

// Turn runs one request to its end, calling onEvent (may be nil) with
// what happens. Cancelling ctx ends the turn, not the session.
func (r *Runner) Turn(ctx context.Context, request string, onEvent func(Event)) (*TurnResult, error) {
	if strings.TrimSpace(request) == "" {
		return nil, errors.New("an empty request")
	}
	if err := r.acquire(); err != nil {
		return nil, err
	}
	defer r.busy.Unlock()
	r.onEvent, r.writeErr, r.checkpoint, r.noted = onEvent, nil, nil, false
	defer func() { r.onEvent = nil }()
	res := r.agent.Turn(ctx, request)
	return &TurnResult{TurnResult: res, Checkpoint: r.checkpoint, SessionErr: r.writeErr}, nil
}

// Compact summarises the conversation before the latest request now (the
// latest request and what followed stay verbatim); the compaction is
// written to the session. loop.ErrNothingToCompact when there is nothing
// before the latest request.
func (r *Runner) Compact(ctx context.Context, onEvent func(Event)) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.busy.Unlock()
	r.onEvent, r.writeErr = onEvent, nil
	defer func() { r.onEvent = nil }()
	if err := r.agent.Compact(ctx); err != nil {
		return err
	}
	return r.writeErr
}

// ParseModel reads "[provider/]model": a prefix that names a known
// provider switches the provider too; anything else is a model name of the
// current provider (model names may hold slashes: meta-llama/Llama-3.1-8B).
func ParseModel(spec, current string) (provider, model string, err error) {
	spec = strings.TrimSpace(spec)
	if p, m, ok := strings.Cut(spec, "/"); ok && slices.Contains(providers.Names(), p) {
		provider, model = p, m
	} else {
		provider, model = current, spec
	}
	if model == "" || strings.ContainsAny(model, " \t\n") {
		return "", "", fmt.Errorf("model %q: give [provider/]name, e.g. anthropic/claude-sonnet-4-5 or gpt-5 (providers: %s)", spec, strings.Join(providers.Names(), ", "))
	}
	return provider, model, nil
}

// SetModel switches the model ("[provider/]name", see ParseModel) for the
// next turns and records the switch in the session (a model_change entry).
func (r *Runner) SetModel(spec string) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.busy.Unlock()
	r.mu.Lock()
	cfg := r.llmCfg
	r.mu.Unlock()
	provider, model, err := ParseModel(spec, cfg.Provider)
	if err != nil {
		return err
	}
	cfg = switched(cfg, provider, model)
	p, err := r.host.provider(cfg)
	if err != nil {
		return err
	}
	if _, err := r.sess.AppendModelChange(provider, model); err != nil {
		return err
	}
	r.agent.SetModel(p, model)
	r.mu.Lock()
	r.llmCfg, r.provider = cfg, p
	if r.router != nil {
		r.router.Header.Provider, r.router.Header.Model = provider, model
	}
	r.mu.Unlock()
	return nil
}

// Fork copies the conversation up to entry at ("": the current point) into
// a new session and continues in it; the old session is closed, unchanged.
// The neuron is shared: its files stay as they are (a Rewind in the fork
// can put them back, the fork has the checkpoints). It returns the new
// session's id.
func (r *Runner) Fork(at string) (string, error) {
	if err := r.acquire(); err != nil {
		return "", err
	}
	defer r.busy.Unlock()
	fork, err := r.sess.Fork(at)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	old := r.sess
	r.sess = fork
	r.mu.Unlock()
	_ = old.Close() // read-only from here on; a close error loses nothing written
	r.reload()
	return fork.ID(), r.keepModel()
}

// keepModel records the model in use when the session's current point
// says another (a rewind or fork went back past a /model): the model is
// the user's choice, not part of the conversation.
func (r *Runner) keepModel() error {
	r.mu.Lock()
	cfg := r.llmCfg
	r.mu.Unlock()
	if p, m := r.sess.Model(); p == cfg.Provider && m == cfg.Model {
		return nil
	}
	_, err := r.sess.AppendModelChange(cfg.Provider, cfg.Model)
	return err
}

// reload gives the agent the session's conversation. Called holding busy
// (or before anyone else has the Runner).
func (r *Runner) reload() {
	msgs, ids := r.sess.History()
	r.agent.SetHistory(msgs)
	r.mu.Lock()
	r.ids = ids
	r.mu.Unlock()
}

// Close closes the session and what the Runner opened. It waits for a
// running operation: cancel its context first.
func (r *Runner) Close() error {
	r.busy.Lock()
	defer r.busy.Unlock()
	return r.close()
}

func (r *Runner) close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	sess, router := r.sess, r.router
	r.mu.Unlock()
	var errs []error
	if router != nil {
		errs = append(errs, router.Close())
	}
	if sess != nil {
		errs = append(errs, sess.Close())
	}
	errs = append(errs, r.mem.close())
	return errors.Join(errs...)
}

// event forwards a loop event.
func (r *Runner) event(e loop.Event) {
	if r.onEvent != nil {
		r.onEvent(Event{Event: e})
	}
}

// message appends a message of the agent's history to the session.
func (r *Runner) message(m llm.Message) {
	e, err := r.sess.AppendMessage(m)
	id := ""
	if err != nil {
		r.noteWriteErr(err)
	} else {
		id = e.ID
	}
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
}

func (r *Runner) noteWriteErr(err error) {
	if r.writeErr == nil {
		r.writeErr = err
	}
}

// compaction records a compaction: the summary, and the first message
// kept verbatim after it.
func (r *Runner) compaction(summary string, kept int) {
	r.mu.Lock()
	first := ""
	if kept > 0 && kept <= len(r.ids) {
		first = r.ids[len(r.ids)-kept]
	}
	r.mu.Unlock()
	e, err := r.sess.AppendCompaction(session.Compaction{Summary: summary, FirstKeptID: first})
	id := ""
	if err != nil {
		r.noteWriteErr(err)
	} else {
		id = e.ID
	}
	r.mu.Lock()
	r.ids = append([]string{id}, r.ids[len(r.ids)-min(kept, len(r.ids)):]...)
	r.mu.Unlock()
}

// kitView is the tool kit as the loop sees it: the Runner's current kit
// (replaced after a rewind restored the files), with a checkpoint taken
// before the first call of a turn that may change the neuron.
type kitView struct{ r *Runner }

func (k kitView) current() *tools.Kit {
	k.r.mu.Lock()
	defer k.r.mu.Unlock()
	return k.r.kit
}

func (k kitView) Tools() []*tools.Tool { return k.current().Tools() }

func (k kitView) Call(ctx context.Context, name string, input json.RawMessage) *tools.Result {
	kit := k.current()
	if !k.r.noted && mayChange(kit, name) {
		k.r.takeCheckpoint(ctx)
	}
	return kit.Call(ctx, name, input)
}

// mayChange reports whether a call of tool name may change the neuron:
// any tool offered that is not annotated read-only (bash is not).
func mayChange(kit *tools.Kit, name string) bool {
	for _, t := range kit.Tools() {
		if t.Name == name {
			return !t.Annotations.ReadOnly
		}
	}
	return false // not offered: the kit refuses it without running anything
}
