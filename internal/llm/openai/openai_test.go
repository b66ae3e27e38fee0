package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/llmtest"
)

func TestStreamText(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	var rec llmtest.Events
	resp, err := p.Stream(context.Background(), userRequest("Does the build pass?"), rec.On)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, e := range rec.All() {
		if e.Kind == llm.EventText {
			text += e.Text
		}
	}
	if text != "The build passes now." || resp.Message.Text() != text {
		t.Errorf("streamed %q, response %q", text, resp.Message.Text())
	}
	if resp.Stop != llm.StopEnd || resp.RawStop != "stop" {
		t.Errorf("stop = %s (%s)", resp.Stop, resp.RawStop)
	}
	want := llm.Usage{InputTokens: 36, OutputTokens: 5, CacheReadTokens: 16}
	if resp.Usage != want {
		t.Errorf("usage = %+v, want %+v", resp.Usage, want)
	}
	last := rec.All()[len(rec.All())-1]
	if last.Kind != llm.EventUsage || *last.Usage != want {
		t.Errorf("last event = %+v, want the usage", last)
	}
	if resp.Model != "gpt-4o-mini-2024-07-18" || resp.Message.Role != llm.RoleAssistant {
		t.Errorf("model %q role %q", resp.Model, resp.Message.Role)
	}
	if got := f.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-test-key" {
		t.Errorf("Authorization = %q", got)
	}
	if f.Requests()[0].Path != "/v1/chat/completions" {
		t.Errorf("path = %q", f.Requests()[0].Path)
	}
}

func TestStreamParallelToolCallsInPieces(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "tools_parallel.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	var rec llmtest.Events
	resp, err := p.Stream(context.Background(), userRequest("read go.mod and run the tests"), rec.On)
	if err != nil {
		t.Fatal(err)
	}
	wantInputs := []string{`{"path": "go.mod"}`, `{"cmd": ["go", "test", "./..."]}`}
	wantIDs := []string{"call_read_1", "call_run_2"}
	wantNames := []string{"read_file", "run"}

	pieces := map[int]string{}
	var starts, ends []llm.Event
	deltas := map[int]int{}
	for _, e := range rec.All() {
		switch e.Kind {
		case llm.EventToolStart:
			starts = append(starts, e)
		case llm.EventToolDelta:
			pieces[e.Index] += e.Text
			deltas[e.Index]++
		case llm.EventToolEnd:
			ends = append(ends, e)
		}
	}
	if len(starts) != 2 || len(ends) != 2 {
		t.Fatalf("events: %v", rec.Kinds())
	}
	for i := range 2 {
		if starts[i].Index != i || starts[i].ToolCall.ID != wantIDs[i] || starts[i].ToolCall.Name != wantNames[i] {
			t.Errorf("start %d = %+v %+v", i, starts[i], starts[i].ToolCall)
		}
		if pieces[i] != wantInputs[i] || deltas[i] < 3 {
			t.Errorf("call %d: %d deltas joined to %q", i, deltas[i], pieces[i])
		}
		if ends[i].Index != i || string(ends[i].ToolCall.Input) != wantInputs[i] {
			t.Errorf("end %d = %s", i, ends[i].ToolCall.Input)
		}
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 2 {
		t.Fatalf("calls = %+v", calls)
	}
	for i, c := range calls {
		if c.ID != wantIDs[i] || c.Name != wantNames[i] || string(c.Input) != wantInputs[i] {
			t.Errorf("call %d = %+v (%s)", i, c, c.Input)
		}
	}
	if resp.Stop != llm.StopToolUse {
		t.Errorf("stop = %s", resp.Stop)
	}
	if resp.Usage != (llm.Usage{InputTokens: 310, OutputTokens: 41}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "ollama_no_usage.sse")})
	p, _ := newTestProvider(t, f, llm.Config{Provider: "ollama", Model: "qwen2.5-coder:7b"})
	var rec llmtest.Events
	resp, err := p.Stream(context.Background(), userRequest("hi"), rec.On)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage != (llm.Usage{}) || resp.Message.Text() != "Hello there" || resp.Stop != llm.StopEnd {
		t.Errorf("resp = %+v", resp)
	}
	for _, e := range rec.All() {
		if e.Kind == llm.EventUsage {
			t.Errorf("usage event from a server that reports none: %+v", e.Usage)
		}
	}
	if f.Requests()[0].Header.Get("Authorization") != "" {
		t.Errorf("a local server got Authorization %q", f.Requests()[0].Header.Get("Authorization"))
	}
	var body map[string]any
	if err := json.Unmarshal(f.Last().Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["model"] != "qwen2.5-coder:7b" {
		t.Errorf("model = %v", body["model"])
	}
}

func TestToolCallWithoutIDOrArguments(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "tool_no_id_stop.sse")})
	p, _ := newTestProvider(t, f, llm.Config{Provider: "ollama", Model: "llama3.1:8b"})
	resp, err := p.Stream(context.Background(), userRequest("list"), nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 1 || calls[0].ID != "call_0" || calls[0].Name != "list_dir" || string(calls[0].Input) != "{}" {
		t.Fatalf("calls = %+v", calls)
	}
	if resp.Stop != llm.StopToolUse {
		t.Errorf("finish_reason stop with tool calls: stop = %s, want tool_use", resp.Stop)
	}
}

func TestInvalidToolArguments(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "bad_args.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	_, err := p.Stream(context.Background(), userRequest("write"), nil)
	var le *llm.Error
	if !errors.As(err, &le) || !strings.Contains(err.Error(), `"write_file"`) || le.Retryable {
		t.Fatalf("err = %v", err)
	}
	if f.Count() != 1 {
		t.Errorf("attempts = %d", f.Count())
	}
}

// chunkStream is a minimal stream ending with finishReason.
func chunkStream(content string, toolCall bool, finishReason string) string {
	var b strings.Builder
	delta := fmt.Sprintf(`{"role":"assistant","content":%q}`, content)
	if toolCall {
		delta = `{"role":"assistant","tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	}
	fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":null}]}\n\n", delta)
	fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":%q}]}\n\n", finishReason)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func TestStopReasons(t *testing.T) {
	for _, tc := range []struct {
		finish string
		tool   bool
		want   llm.StopReason
	}{
		{"stop", false, llm.StopEnd},
		{"length", false, llm.StopMaxTokens},
		{"content_filter", false, llm.StopRefusal},
		{"tool_calls", true, llm.StopToolUse},
		{"function_call", true, llm.StopToolUse},
		{"stop", true, llm.StopToolUse},
		{"eos_token", false, llm.StopOther},
	} {
		t.Run(fmt.Sprintf("%s/tool=%v", tc.finish, tc.tool), func(t *testing.T) {
			f := llmtest.Serve(t, llmtest.Reply{Body: chunkStream("x", tc.tool, tc.finish)})
			p, _ := newTestProvider(t, f, llm.Config{})
			resp, err := p.Stream(context.Background(), userRequest("go"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Stop != tc.want || resp.RawStop != tc.finish {
				t.Errorf("stop = %s (%s), want %s", resp.Stop, resp.RawStop, tc.want)
			}
		})
	}
}

func TestFollowUpRequestBody(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	temp := 0.2
	req := &llm.Request{
		System:      "You are a careful engineer.",
		MaxTokens:   1024,
		Temperature: &temp,
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{{Text: "Run the tests and read go.mod."}}},
			{Role: llm.RoleAssistant, Parts: []llm.Part{
				{Thinking: "not sent back over Chat Completions"},
				{Text: "Doing both."},
				{ToolCall: &llm.ToolCall{ID: "call_read_1", Name: "read_file", Input: json.RawMessage(`{"path": "go.mod"}`)}},
				{ToolCall: &llm.ToolCall{ID: "call_run_2", Name: "run", Input: json.RawMessage(`{"cmd": ["go", "test", "./..."]}`)}},
			}},
			{Role: llm.RoleTool, Parts: []llm.Part{
				{ToolResult: &llm.ToolResult{CallID: "call_read_1", Name: "read_file", Content: "module example.com/demo\n"}},
				{ToolResult: &llm.ToolResult{CallID: "call_run_2", Name: "run", Content: "exit status 1", IsError: true}},
			}},
		},
		Tools: []llm.Tool{
			{Name: "read_file", Description: "Read a file.", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
			{Name: "run", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"array","items":{"type":"string"}}},"required":["cmd"]}`)},
		},
	}
	if _, err := p.Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(f.Last().Body, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(llmtest.Fixture(t, "followup_request.json")), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("request body:\n%s\nwant:\n%s", f.Last().Body, llmtest.Fixture(t, "followup_request.json"))
	}
}

func TestLocalServerGetsMaxTokens(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "ollama_no_usage.sse")})
	p, _ := newTestProvider(t, f, llm.Config{Provider: "vllm", Model: "m"})
	req := userRequest("hi")
	req.MaxTokens = 77
	if _, err := p.Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.Unmarshal(f.Last().Body, &body)
	if body["max_tokens"] != 77.0 || body["max_completion_tokens"] != nil {
		t.Errorf("body = %s", f.Last().Body)
	}
}

func TestRetryAfterThenSuccess(t *testing.T) {
	for _, tc := range []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"}, 1500 * time.Millisecond},
	} {
		t.Run(fmt.Sprint(tc.want), func(t *testing.T) {
			f := llmtest.Serve(t,
				llmtest.Reply{Status: 429, Header: tc.header, Body: llmtest.Fixture(t, "rate_limit.json")},
				llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
			p, s := newTestProvider(t, f, llm.Config{})
			resp, err := p.Stream(context.Background(), userRequest("hi"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Text() != "The build passes now." {
				t.Errorf("text = %q", resp.Message.Text())
			}
			if f.Count() != 2 || !reflect.DeepEqual(s.All(), []time.Duration{tc.want}) {
				t.Errorf("attempts = %d, sleeps = %v", f.Count(), s.All())
			}
		})
	}
}

func TestServerErrorRetriedWithBackoff(t *testing.T) {
	f := llmtest.Serve(t,
		llmtest.Reply{Status: 503, Body: llmtest.Fixture(t, "server_error.json")},
		llmtest.Reply{Status: 500, Body: llmtest.Fixture(t, "server_error.json")},
		llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
	p, s := newTestProvider(t, f, llm.Config{})
	if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	got := s.All()
	if f.Count() != 3 || len(got) != 2 {
		t.Fatalf("attempts = %d, sleeps = %v", f.Count(), got)
	}
	for i, d := range got {
		hi := baseBackoff << i
		if d < hi/2 || d > hi {
			t.Errorf("sleep %d = %v, want within [%v, %v]", i, d, hi/2, hi)
		}
	}
}

func TestRetriesExhausted(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Status: 503, Body: llmtest.Fixture(t, "server_error.json")})
	p, s := newTestProvider(t, f, llm.Config{MaxRetries: 2})
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	var le *llm.Error
	if !errors.As(err, &le) || le.Status != 503 || !le.Retryable || le.Code != "server_error" ||
		le.Message != "The server is overloaded or not ready yet." {
		t.Fatalf("err = %#v", err)
	}
	if f.Count() != 3 || len(s.All()) != 2 {
		t.Errorf("attempts = %d, sleeps = %v", f.Count(), s.All())
	}
}

func TestNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		code     string
		overflow bool
	}{
		{"context_length_exceeded", 400, "context_length.json", "context_length_exceeded", true},
		{"vllm_overflow", 400, "vllm_overflow.json", "BadRequestError", true},
		{"bad key", 401, "", "invalid_api_key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
			if tc.body != "" {
				body = llmtest.Fixture(t, tc.body)
			}
			f := llmtest.Serve(t, llmtest.Reply{Status: tc.status, Body: body})
			p, _ := newTestProvider(t, f, llm.Config{})
			_, err := p.Stream(context.Background(), userRequest("hi"), nil)
			var le *llm.Error
			if !errors.As(err, &le) || le.Status != tc.status || le.Code != tc.code || le.Retryable {
				t.Fatalf("err = %#v", err)
			}
			if llm.IsContextOverflow(err) != tc.overflow {
				t.Errorf("IsContextOverflow = %v", !tc.overflow)
			}
			if f.Count() != 1 {
				t.Errorf("attempts = %d", f.Count())
			}
			if strings.Contains(err.Error(), "sk-test-key") {
				t.Errorf("the key leaked into %q", err)
			}
		})
	}
}

func TestConnectionResetBeforeOutputRetried(t *testing.T) {
	llmtest.ResetBeforeOutputRetried(t, llmtest.Fixture(t, "text.sse"), testProvider(t))
}

func TestNoRetryAfterOutputBegan(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "midstream_error.sse")})
	p, s := newTestProvider(t, f, llm.Config{})
	var rec llmtest.Events
	_, err := p.Stream(context.Background(), userRequest("hi"), rec.On)
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != "server_error" || !strings.Contains(le.Message, "server had an error") {
		t.Fatalf("err = %#v", err)
	}
	if f.Count() != 1 || len(s.All()) != 0 {
		t.Errorf("attempts = %d, sleeps = %v: retried after output reached the caller", f.Count(), s.All())
	}
	if k := rec.Kinds(); len(k) != 1 || k[0] != llm.EventText {
		t.Errorf("events = %v", k)
	}
}

func TestCancelReturnsPromptlyWithoutLeak(t *testing.T) {
	first := strings.SplitAfter(llmtest.Fixture(t, "text.sse"), "\n\n")[1]
	llmtest.CancelMidStream(t, first, testProvider(t))
}

func TestCancelWhileWaitingToRetry(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Status: 429, Header: map[string]string{"Retry-After": "30"}, Body: llmtest.Fixture(t, "rate_limit.json")})
	ctx, cancel := context.WithCancel(context.Background())
	p, _ := newTestProvider(t, f, llm.Config{}, llm.WithSleep(func(ctx context.Context, d time.Duration) error {
		cancel()
		return llm.Sleep(ctx, d)
	}))
	_, err := p.Stream(ctx, userRequest("hi"), nil)
	if !errors.Is(err, context.Canceled) || f.Count() != 1 {
		t.Fatalf("err = %v after %d attempts", err, f.Count())
	}
}

func TestEventIndexIsPositionInMessage(t *testing.T) {
	text := strings.SplitAfter(chunkStream("Let me look.", false, ""), "\n\n")[0]
	f := llmtest.Serve(t, llmtest.Reply{Body: text + chunkStream("", true, "tool_calls")})
	p, _ := newTestProvider(t, f, llm.Config{})
	var rec llmtest.Events
	resp, err := p.Stream(context.Background(), userRequest("go"), rec.On)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.All() {
		want := map[llm.EventKind]int{llm.EventText: 0, llm.EventToolStart: 1, llm.EventToolDelta: 1, llm.EventToolEnd: 1}
		if w, ok := want[e.Kind]; ok && e.Index != w {
			t.Errorf("%s at %d, want %d", e.Kind, e.Index, w)
		}
	}
	parts := resp.Message.Parts
	if len(parts) != 2 || parts[0].Text != "Let me look." || parts[1].ToolCall == nil || parts[1].ToolCall.ID != "call_x" {
		t.Errorf("parts = %+v", parts)
	}
}

func TestCutStreamRetriedOnlyBeforeOutput(t *testing.T) {
	cut := strings.SplitAfter(llmtest.Fixture(t, "text.sse"), "\n\n")[0] // role chunk only: no event
	f := llmtest.Serve(t, llmtest.Reply{Body: cut}, llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil || f.Count() != 2 {
		t.Fatalf("err = %v after %d attempts", err, f.Count())
	}
	cut = strings.Join(strings.SplitAfter(llmtest.Fixture(t, "text.sse"), "\n\n")[:3], "") // some text, then EOF
	f = llmtest.Serve(t, llmtest.Reply{Body: cut})
	p, _ = newTestProvider(t, f, llm.Config{})
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != "incomplete_stream" || f.Count() != 1 {
		t.Fatalf("err = %v after %d attempts", err, f.Count())
	}
}
