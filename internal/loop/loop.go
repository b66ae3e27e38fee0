// Package loop is the agent runtime's turn loop: the model is asked, the
// tool calls it makes run through the tool kit (validation, policy, limits,
// redaction are the kit's), their results go back, until the model stops,
// a limit is reached, the user cancels, or the loop detector ends the turn.
// The context budget is checked before every model call and the history
// compacted when it nears the window.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// Kit is what the loop needs of the tool kit.
type Kit interface {
	Tools() []*tools.Tool
	Call(ctx context.Context, name string, input json.RawMessage) *tools.Result
}

var _ Kit = (*tools.Kit)(nil)

// Config shapes an agent.
type Config struct {
	Provider llm.Provider
	Model    string
	Kit      Kit
	System   string
	// MaxSteps bounds model calls per turn (default 50).
	MaxSteps int
	// TimeLimit bounds one turn's wall time (0: none).
	TimeLimit time.Duration
	// MaxOutputTokens per model call (0: the provider's default).
	MaxOutputTokens int
	// Budget is the context budget (Window 0: no compaction).
	Budget Budget
	// OnEvent receives what happens, for a UI or a headless log.
	OnEvent func(Event)
	// OnMessage receives every message added to the history (a session
	// writer); the kit has redacted tool results already.
	OnMessage func(llm.Message)
	// OnCompaction is told when the history was summarised: the summary,
	// and how many messages at the end of the previous history were kept
	// after it (a session's compaction entry: its first kept entry).
	OnCompaction func(summary string, kept int)
	// Detector finds loops (default NewDetector()); DisableLoopDetection
	// turns it off.
	Detector             *Detector
	DisableLoopDetection bool
}

// EventKind names an event of a turn.
type EventKind string

// Events.
const (
	EventModel      EventKind = "model"       // a streamed model event (Model)
	EventToolStart  EventKind = "tool_start"  // a tool call is about to run (Call)
	EventToolResult EventKind = "tool_result" // it ran (Call, Result)
	EventLoop       EventKind = "loop"        // the loop detector spoke (Finding)
	EventCompaction EventKind = "compaction"  // the history was compacted (Text: what)
	EventTurnEnd    EventKind = "turn_end"    // the turn ended (Stop)
)

// Event is one thing that happened in a turn.
type Event struct {
	Kind    EventKind
	Model   *llm.Event
	Call    *llm.ToolCall
	Result  *tools.Result
	Finding *Finding
	Text    string
	Stop    Stop
}

// Stop says why a turn ended.
type Stop string

// Stops.
const (
	StopDone      Stop = "done"       // the model answered without tool use
	StopSteps     Stop = "step_limit" // MaxSteps model calls
	StopTime      Stop = "time_limit"
	StopMaxTokens Stop = "max_tokens" // the model's output was cut, and continuing did not help
	StopLoop      Stop = "loop"       // the loop detector ended it
	StopCancelled Stop = "cancelled"  // the user cancelled
	StopError     Stop = "error"      // the provider failed
	StopRefusal   Stop = "refusal"
)

// Agent is one conversation with the model over a neuron's tools.
type Agent struct {
	cfg     Config
	history []llm.Message
	usage   llm.Usage
	budget  *budgetState
}

// New returns an agent with an empty history.
func New(cfg Config) (*Agent, error) {
	if cfg.Provider == nil || cfg.Kit == nil {
		return nil, errors.New("loop: a provider and a tool kit are required")
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 50
	}
	if cfg.Detector == nil {
		cfg.Detector = NewDetector()
	}
	return &Agent{cfg: cfg, budget: newBudgetState(cfg.Budget)}, nil
}

// SetHistory replaces the history (a resumed session, a rewind, a fork).
// The loop detector forgets the answers it saw: a request asked again after
// a rewind is not a loop.
func (a *Agent) SetHistory(msgs []llm.Message) {
	a.history = append([]llm.Message(nil), msgs...)
	a.cfg.Detector.Reset()
}

// SetModel switches the provider and model of the next model calls. The
// budget's exact counter follows the provider when it was the previous
// provider's own (or there was none), and the token estimate is
// recalibrated by the new provider's first report.
func (a *Agent) SetModel(p llm.Provider, model string) {
	if old, ok := a.cfg.Provider.(llm.TokenCounter); ok && a.budget.cfg.Counter == old {
		a.budget.cfg.Counter = nil
	}
	if c, ok := p.(llm.TokenCounter); ok && a.budget.cfg.Counter == nil {
		a.budget.cfg.Counter = c
	}
	a.cfg.Provider, a.cfg.Model = p, model
	a.budget.ratio = defaultRatio
}

// Model returns the provider and model the next model call uses.
func (a *Agent) Model() (llm.Provider, string) { return a.cfg.Provider, a.cfg.Model }

// SetSystem replaces the system prompt (rebuilt after the workspace's
// AGENTS.md may have changed, e.g. after a rewind restored the files).
func (a *Agent) SetSystem(system string) { a.cfg.System = system }

// History returns the conversation so far.
func (a *Agent) History() []llm.Message { return append([]llm.Message(nil), a.history...) }

// Usage is the tokens used by this agent's model calls so far.
func (a *Agent) Usage() llm.Usage { return a.usage }

// TurnResult is how a turn ended.
type TurnResult struct {
	Stop    Stop
	Steps   int
	Answer  string // the model's last text
	Message string // why it stopped, for a person (limits, loops, errors)
	Err     error
}

func (a *Agent) emit(e Event) {
	if a.cfg.OnEvent != nil {
		a.cfg.OnEvent(e)
	}
}

func (a *Agent) add(m llm.Message) {
	a.history = append(a.history, m)
	if a.cfg.OnMessage != nil {
		a.cfg.OnMessage(m)
	}
}

// toolDefs describes the kit's tools to the model.
func (a *Agent) toolDefs() []llm.Tool {
	var out []llm.Tool
	for _, t := range a.cfg.Kit.Tools() {
		schema, _ := json.Marshal(t.Schema) // a schema the kit built marshals
		out = append(out, llm.Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return out
}

// Turn runs one user request to its end. Cancelling ctx (Ctrl-C) ends the
// turn, not the agent: the history keeps what happened, and a tool call in
// flight is cancelled with it (the channel kills the command's process
// group), leaving no process behind.
func (a *Agent) Turn(ctx context.Context, request string) *TurnResult {
	if a.cfg.TimeLimit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.TimeLimit)
		defer cancel()
	}
	det := a.cfg.Detector
	det.NewTurn()
	a.add(llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Text: request}}})
	defs := a.toolDefs()
	res := &TurnResult{}
	end := func(stop Stop, msg string, err error) *TurnResult {
		res.Stop, res.Message, res.Err = stop, msg, err
		a.emit(Event{Kind: EventTurnEnd, Stop: stop, Text: msg})
		return res
	}
	var pendingWarning string
	for {
		if res.Steps >= a.cfg.MaxSteps {
			return end(StopSteps, fmt.Sprintf("stopped after %d model calls (the step limit); say \"continue\" to go on", res.Steps), nil)
		}
		if err := ctx.Err(); err != nil {
			return a.cancelled(end, err)
		}
		req := &llm.Request{Model: a.cfg.Model, System: a.cfg.System, Messages: a.history, Tools: defs, MaxTokens: a.cfg.MaxOutputTokens}
		if a.budget.over(req) {
			if err := a.compact(ctx, request, false); err != nil {
				return a.failed(ctx, end, err)
			}
			req.Messages = a.history
			if a.budget.over(req) { // compaction did not make room: an overflow
				if f := a.overflow(); f.Verdict == End {
					return end(StopLoop, f.Message, nil)
				}
			}
		}
		res.Steps++
		resp, err := a.cfg.Provider.Stream(ctx, req, func(e llm.Event) { a.emit(Event{Kind: EventModel, Model: &e}) })
		if llm.IsContextOverflow(err) && a.budget.cfg.Window > 0 {
			// The estimate was wrong: compact now and ask again.
			a.budget.overflowed(req)
			if f := a.overflow(); f.Verdict == End {
				return end(StopLoop, f.Message, nil)
			}
			if cerr := a.compact(ctx, request, false); cerr != nil {
				return a.failed(ctx, end, cerr)
			}
			continue
		}
		if err != nil {
			return a.failed(ctx, end, err)
		}
		a.usage.InputTokens += resp.Usage.InputTokens
		a.usage.OutputTokens += resp.Usage.OutputTokens
		a.budget.observe(req, resp.Usage)
		a.add(resp.Message)
		calls := resp.Message.ToolCalls()
		if text := resp.Message.Text(); text != "" {
			res.Answer = text
		}
		if len(calls) == 0 {
			switch resp.Stop {
			case llm.StopMaxTokens:
				return end(StopMaxTokens, "the model's answer was cut at its output limit", nil)
			case llm.StopRefusal:
				return end(StopRefusal, "the model refused", nil)
			}
			if !a.cfg.DisableLoopDetection {
				if f := det.Answer(request, res.Answer); f.Verdict == End {
					a.emit(Event{Kind: EventLoop, Finding: &f})
					return end(StopLoop, f.Message, nil)
				}
			}
			return end(StopDone, "", nil)
		}
		results, f := a.runCalls(ctx, calls, &pendingWarning)
		a.add(llm.Message{Role: llm.RoleTool, Parts: results})
		if ctx.Err() != nil {
			return a.cancelled(end, ctx.Err())
		}
		if f.Verdict == End {
			return end(StopLoop, "ended the turn: "+f.Message, nil)
		}
	}
}

// runCalls runs a model message's tool calls in order and returns their
// results; every call gets a result (a cancelled or refused call says so),
// as the providers require.
func (a *Agent) runCalls(ctx context.Context, calls []*llm.ToolCall, warning *string) ([]llm.Part, Finding) {
	det := a.cfg.Detector
	var parts []llm.Part
	var worst Finding
	for _, call := range calls {
		result := &tools.Result{}
		switch {
		case ctx.Err() != nil:
			result = &tools.Result{IsError: true, Text: "not run: the user cancelled the turn"}
		case worst.Verdict == End:
			result = &tools.Result{IsError: true, Text: "not run: the turn was ended by the loop detector"}
		default:
			var f Finding
			if !a.cfg.DisableLoopDetection {
				f = det.Before(call.Name, call.Input)
			}
			if f.Verdict >= Deny {
				det.Refused(call.Name, call.Input)
				a.emit(Event{Kind: EventLoop, Finding: &f})
				worst = worse(worst, f)
				result = &tools.Result{IsError: true, Text: "refused by the loop detector: " + f.Message + ". Do something different."}
				if f.Verdict == End {
					result.Text = "not run: " + f.Message + "; the turn is over"
				}
				break
			}
			a.emit(Event{Kind: EventToolStart, Call: call})
			result = a.cfg.Kit.Call(ctx, call.Name, call.Input)
			a.emit(Event{Kind: EventToolResult, Call: call, Result: result})
			if !a.cfg.DisableLoopDetection {
				if w := det.After(call.Name, call.Input, result.Text, result.IsError); w.Verdict == Warn {
					a.emit(Event{Kind: EventLoop, Finding: &w})
					*warning = w.Message
				}
			}
		}
		text := result.Text
		if *warning != "" && result != nil {
			text += "\n\n[loop detector] " + *warning
			*warning = ""
		}
		parts = append(parts, llm.Part{ToolResult: &llm.ToolResult{CallID: call.ID, Name: call.Name, Content: text, IsError: result.IsError}})
	}
	return parts, worst
}

// overflow records a context overflow with the loop detector.
func (a *Agent) overflow() Finding {
	if a.cfg.DisableLoopDetection {
		return Finding{}
	}
	f := a.cfg.Detector.Overflow()
	if f.Verdict != Proceed {
		a.emit(Event{Kind: EventLoop, Finding: &f})
	}
	return f
}

func (a *Agent) cancelled(end func(Stop, string, error) *TurnResult, err error) *TurnResult {
	if errors.Is(err, context.DeadlineExceeded) {
		a.unanswered(NoAnswerTime)
		return end(StopTime, fmt.Sprintf("stopped at the time limit (%s)", a.cfg.TimeLimit), nil)
	}
	a.unanswered(NoAnswerCancelled)
	return end(StopCancelled, "cancelled", nil)
}

func (a *Agent) failed(ctx context.Context, end func(Stop, string, error) *TurnResult, err error) *TurnResult {
	if ctx.Err() != nil {
		return a.cancelled(end, ctx.Err())
	}
	a.unanswered(NoAnswerError)
	return end(StopError, err.Error(), err)
}

// What a turn that ended before the model answered its request leaves in
// the history in place of the answer.
const (
	NoAnswerCancelled = "[no answer: the user cancelled this request]"
	NoAnswerTime      = "[no answer: the turn reached its time limit]"
	NoAnswerError     = "[no answer: the model call failed]"
)

// unanswered closes a turn that ended before the model answered its
// request: an assistant message saying why follows the request, in the
// history and (through OnMessage) the session. Without it the next request
// would follow an unanswered one: two user turns in a row, which a
// provider that wants roles to alternate refuses or merges into one
// request, the cancelled one answered after all. A turn that ended after
// tool results needs nothing: every call has its result, and the next
// request follows them.
func (a *Agent) unanswered(why string) {
	if n := len(a.history); n > 0 && a.history[n-1].Role == llm.RoleUser {
		a.add(llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: why}}})
	}
}
