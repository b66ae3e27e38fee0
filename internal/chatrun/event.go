package chatrun

import (
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
)

// Record is an event as one JSON object: what `nsys-cortex chat -o json`
// prints one per line, and what a server streams. Its "type" is text,
// tool_start, tool_result, loop, compaction, checkpoint or turn_end
// (docs/agent.md lists the fields of each). ok is false for events that
// are not recorded: pieces of tool input and of reasoning (the tool_start
// record carries the whole call).
func Record(e Event) (rec map[string]any, ok bool) {
	rec = map[string]any{"type": string(e.Kind)}
	switch e.Kind {
	case loop.EventModel:
		if e.Model == nil || e.Model.Kind != llm.EventText {
			return nil, false
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
	case EventCheckpoint:
		rec["name"], rec["neuron"], rec["files"] = e.Checkpoint.Name, e.Checkpoint.Neuron, e.Checkpoint.Files
		if e.Checkpoint.Err != "" {
			rec["error"] = e.Checkpoint.Err
		}
		if len(e.Checkpoint.Pruned) > 0 {
			rec["pruned"] = e.Checkpoint.Pruned
		}
	case loop.EventTurnEnd:
		rec["stop"], rec["message"] = string(e.Stop), e.Text
	default:
		return nil, false
	}
	return rec, true
}
