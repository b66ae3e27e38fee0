// Package logline is how the neuron side writes the neuron's log, which
// the host keeps and an operator reads on a terminal (nsys-cortex logs
// ID). What the agent and PID 1 log carries the neuron's own strings —
// file names, host names, errors — so each line is cleaned (no control
// character, no newline of the neuron's choosing: protocol.CleanLogText)
// and the whole is bounded: a neuron that makes its agent log as fast as
// it can fills nothing past the writer's budget.
package logline

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// DefaultBudget is what one agent or PID 1 writes to a neuron's log in
// one run, at most.
const DefaultBudget = 4 << 20

// Writer writes log records (one per Write, as log.Logger makes them) to
// w, each cleaned onto one line, until budget bytes are spent; then one
// line says so and the rest is counted and dropped.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	left    int64
	dropped int64
}

// New returns a Writer with budget bytes to spend on w.
func New(w io.Writer, budget int64) *Writer { return &Writer{w: w, left: budget} }

// Write writes p as one line. It never fails: a log is no reason to stop.
func (lw *Writer) Write(p []byte) (int, error) {
	line := protocol.CleanLogText(strings.TrimSuffix(string(p), "\n")) + "\n"
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.left <= 0 {
		lw.dropped += int64(len(p))
		return len(p), nil
	}
	if int64(len(line)) > lw.left {
		lw.dropped += int64(len(p))
		lw.left = 0
		fmt.Fprintf(lw.w, "(log limit reached: what this process logs from here on is dropped)\n")
		return len(p), nil
	}
	lw.left -= int64(len(line))
	lw.w.Write([]byte(line)) // a full disk: the line is lost, the process goes on
	return len(p), nil
}

// Dropped is how many bytes were dropped past the budget.
func (lw *Writer) Dropped() int64 {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.dropped
}

// TimeLayout is how neuron-side processes stamp their lines (UTC, to the
// microsecond), as the host and the agent's logger do.
const TimeLayout = "2006/01/02 15:04:05.000000"

// Logf returns a printf that writes "TIME who: message" lines to w
// through a Writer of DefaultBudget.
func Logf(w io.Writer, who string) func(format string, args ...any) {
	lw := New(w, DefaultBudget)
	return func(format string, args ...any) {
		fmt.Fprintf(lw, "%s %s: %s", time.Now().UTC().Format(TimeLayout), who, fmt.Sprintf(format, args...))
	}
}
