package loop

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
)

// Verdict is what the loop detector says about a step.
type Verdict int

// Verdicts, in escalating order: a warning injected for the model, the
// repeated call refused, the turn ended.
const (
	Proceed Verdict = iota
	Warn
	Deny
	End
)

func (v Verdict) String() string {
	return [...]string{"proceed", "warn", "deny", "end"}[v]
}

// Finding is one detected loop.
type Finding struct {
	Verdict Verdict
	Pattern string // which pattern: same-call-same-result, same-call-failing, repeated-answer, alternation, overflow, window
	Message string // what the model (or the user, for End) is told
}

// Detector finds an agent going round in circles. Its patterns:
//   - the same call with the same result, again and again;
//   - the same call failing again and again;
//   - the same answer with no tool use, twice;
//   - two calls alternating (A, B, A, B, ...);
//   - the context overflowing (compaction) again and again in one turn;
//   - any step signature filling a window of recent steps.
//
// Each pattern escalates in steps (Warn, Deny, End) as it repeats. Polling
// a running process (the process tool's output and list actions while the
// process runs) is never counted.
type Detector struct {
	// Thresholds: how many repetitions warn, deny and end.
	WarnAt, DenyAt, EndAt int
	// Window is how many recent steps the signature window holds, and
	// WindowMax how often one signature may appear in it before a warning.
	Window, WindowMax int

	steps     []step // this turn's calls, oldest first
	answers   []uint64
	overflows int
}

// step is one tool call and how it went.
type step struct {
	call   uint64 // name + input
	result uint64
	failed bool
	poll   bool
}

// NewDetector returns a detector with the default thresholds: warn at 3
// repetitions, deny at 4, end at 5; a window of 20 steps allowing 6 of one
// signature.
func NewDetector() *Detector {
	return &Detector{WarnAt: 3, DenyAt: 4, EndAt: 5, Window: 20, WindowMax: 6}
}

// NewTurn forgets the calls of the previous turn (answers are kept: an
// identical answer across turns is a loop too).
func (d *Detector) NewTurn() {
	d.steps = d.steps[:0]
	d.overflows = 0
}

// Reset forgets everything: the calls of the turn and the answers of earlier
// turns (the history they belonged to was replaced).
func (d *Detector) Reset() {
	d.NewTurn()
	d.answers = d.answers[:0]
}

// signature hashes a call: its tool and its input with keys in canonical
// order (so {"a":1,"b":2} and {"b":2,"a":1} are the same call).
func signature(name string, input json.RawMessage) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	var v any
	if json.Unmarshal(input, &v) == nil {
		b, _ := json.Marshal(v) // maps marshal with sorted keys
		h.Write(b)
	} else {
		h.Write(input)
	}
	return h.Sum64()
}

func hashText(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// isPoll reports whether a call polls a running process.
func isPoll(name string, input json.RawMessage, result string) bool {
	if name != "process" {
		return false
	}
	var in struct{ Action string }
	_ = json.Unmarshal(input, &in) // a call that does not parse is not a poll
	switch in.Action {
	case "list":
		return true
	case "output":
		return strings.Contains(result, "still running")
	}
	return false
}

// escalate maps a repetition count to a verdict.
func (d *Detector) escalate(n int) Verdict {
	switch {
	case n >= d.EndAt:
		return End
	case n >= d.DenyAt:
		return Deny
	case n >= d.WarnAt:
		return Warn
	}
	return Proceed
}

// Before judges a call about to run, from the calls made so far: a call
// that would be the DenyAt-th repetition of a loop is refused, the EndAt-th
// ends the turn.
func (d *Detector) Before(name string, input json.RawMessage) Finding {
	sig := signature(name, input)
	// Same call, same result: count the trailing identical results of
	// this call; the next one would repeat them.
	same, failing := 0, 0
	var last *step
	for i := len(d.steps) - 1; i >= 0; i-- {
		s := &d.steps[i]
		if s.call != sig || s.poll {
			continue
		}
		if last == nil {
			last = s
		}
		if s.result == last.result {
			same++
		}
		if s.failed {
			failing++
		}
	}
	// A call that keeps failing is the more specific finding: it comes
	// first and wins ties.
	var f Finding
	if v := d.escalate(failing + 1); v >= Deny {
		f = worse(f, Finding{Verdict: v, Pattern: "same-call-failing",
			Message: fmt.Sprintf("%s failed %d times with the same input", name, failing)})
	}
	if v := d.escalate(same + 1); v >= Deny {
		f = worse(f, Finding{Verdict: v, Pattern: "same-call-same-result",
			Message: fmt.Sprintf("%s was called %d times with the same input and gave the same result each time", name, same)})
	}
	if v := d.alternation(sig); v >= Deny {
		f = worse(f, Finding{Verdict: v, Pattern: "alternation", Message: "the last calls alternate between the same two calls"})
	}
	return f
}

// Refused records a call the detector refused (Before said Deny), as a
// repetition of that call's last outcome, so the next repetition escalates.
func (d *Detector) Refused(name string, input json.RawMessage) {
	sig := signature(name, input)
	for i := len(d.steps) - 1; i >= 0; i-- {
		if d.steps[i].call == sig {
			d.steps = append(d.steps, d.steps[i])
			return
		}
	}
	d.steps = append(d.steps, step{call: sig})
}

// After records a call's result and returns a warning to inject, if the
// call completed a pattern.
func (d *Detector) After(name string, input json.RawMessage, result string, failed bool) Finding {
	s := step{call: signature(name, input), result: hashText(result), failed: failed, poll: isPoll(name, input, result)}
	d.steps = append(d.steps, s)
	if s.poll {
		return Finding{}
	}
	same, failing := 0, 0
	for i := len(d.steps) - 1; i >= 0; i-- {
		p := d.steps[i]
		if p.call != s.call || p.poll {
			continue
		}
		if p.result == s.result {
			same++
		}
		if p.failed {
			failing++
		}
	}
	var f Finding
	if failed && failing >= d.WarnAt {
		f = worse(f, Finding{Verdict: Warn, Pattern: "same-call-failing",
			Message: fmt.Sprintf("%s has failed %d times with the same input. Read the error, change the input or the approach.", name, failing)})
	}
	if same >= d.WarnAt {
		f = worse(f, Finding{Verdict: Warn, Pattern: "same-call-same-result",
			Message: fmt.Sprintf("You have called %s with the same input %d times and got the same result. Repeating it will not change the result: try a different approach.", name, same)})
	}
	if d.alternation(0) >= Warn {
		f = worse(f, Finding{Verdict: Warn, Pattern: "alternation",
			Message: "Your last calls alternate between the same two calls (A, B, A, B). Step back and change the plan."})
	}
	if n := d.windowCount(s.call); n > d.WindowMax {
		f = worse(f, Finding{Verdict: Warn, Pattern: "window",
			Message: fmt.Sprintf("%s with this input was called %d times in the last %d steps. Avoid repeating it.", name, n, d.Window)})
	}
	return f
}

// alternation measures A,B,A,B at the end of the steps (with next, when
// non-zero, as the step about to come): 4 alternating steps warn, 6 deny,
// 8 end.
func (d *Detector) alternation(next uint64) Verdict {
	var sigs []uint64
	for _, s := range d.steps {
		if !s.poll {
			sigs = append(sigs, s.call)
		}
	}
	if next != 0 {
		sigs = append(sigs, next)
	}
	n := len(sigs)
	if n < 4 {
		return Proceed
	}
	a, b := sigs[n-1], sigs[n-2]
	if a == b {
		return Proceed
	}
	run := 2
	for i := n - 3; i >= 0; i-- {
		want := a
		if (n-1-i)%2 == 1 {
			want = b
		}
		if sigs[i] != want {
			break
		}
		run++
	}
	switch {
	case run >= 8:
		return End
	case run >= 6:
		return Deny
	case run >= 4:
		return Warn
	}
	return Proceed
}

// windowCount counts sig among the last Window non-polling steps.
func (d *Detector) windowCount(sig uint64) int {
	n, seen := 0, 0
	for i := len(d.steps) - 1; i >= 0 && seen < d.Window; i-- {
		if d.steps[i].poll {
			continue
		}
		seen++
		if d.steps[i].call == sig {
			n++
		}
	}
	return n
}

// Answer records an assistant answer with no tool use to request; the same
// answer to the same request as the previous time ("continue", "continue")
// is a loop: warned the first time, the turn ended the next. The same
// answer to different requests ("done.") is not.
func (d *Detector) Answer(request, text string) Finding {
	h := hashText(strings.TrimSpace(request)) ^ hashText(strings.TrimSpace(text))*31
	repeats := 0
	for i := len(d.answers) - 1; i >= 0 && d.answers[i] == h; i-- {
		repeats++
	}
	d.answers = append(d.answers, h)
	if len(d.answers) > 16 {
		d.answers = d.answers[1:]
	}
	switch {
	case repeats >= 2:
		return Finding{Verdict: End, Pattern: "repeated-answer", Message: "the model gave the same answer three times in a row"}
	case repeats == 1:
		return Finding{Verdict: Warn, Pattern: "repeated-answer", Message: "You gave exactly the same answer as before. If you are stuck, say what is blocking you."}
	}
	return Finding{}
}

// Overflow records a context overflow (a compaction) in this turn.
func (d *Detector) Overflow() Finding {
	d.overflows++
	if d.overflows >= 3 {
		return Finding{Verdict: End, Pattern: "overflow", Message: fmt.Sprintf("the context overflowed %d times in one turn; the task does not fit: split it, or start a new session", d.overflows)}
	}
	return Finding{}
}

func worse(a, b Finding) Finding {
	if b.Verdict > a.Verdict {
		return b
	}
	return a
}
