// Package chatrun runs chat sessions of the built-in agent: one Runner is
// one session (a JSONL file of internal/session) driven by one agent loop
// (internal/loop) over the tool kit of one neuron (internal/tools), with
// the system prompt built from the agent's files and the neuron's facts
// (internal/prompt), the sessions_* tools (loop.Router), and checkpoints
// that let a rewind put the neuron's files back with the conversation.
//
// It is the one implementation the command line (nsys-cortex chat) and
// the HTTP API share: a Runner is safe for concurrent use, runs one
// operation at a time (a second gets ErrBusy, never a queue), reports what
// happens through the callback each call is given (so a server streams
// each session's events to its own client), and holds nothing global, so a
// server may run many Runners at once.
//
// What it must not do: draw anything (rendering, spinners, prompts and
// signals belong to the caller), choose an isolation mode (Host.Ensure
// does), or write a key anywhere (providers read theirs from the
// environment; sessions never hold them).
package chatrun
