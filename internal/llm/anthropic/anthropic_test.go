package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/llmtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func userText(s string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Text: s}}}
}

func simpleRequest() *llm.Request {
	return &llm.Request{System: "Be brief.", Messages: []llm.Message{userText("Hello")}}
}

func asLLMError(t *testing.T, err error) *llm.Error {
	t.Helper()
	var e *llm.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *llm.Error", err, err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("error text contains the key: %v", err)
	}
	return e
}

func TestStreamText(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "text.sse"))
	p, _ := f.provider(llm.Config{})
	var c llmtest.Events
	resp, err := p.Stream(context.Background(), simpleRequest(), c.On)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if got := c.Text(llm.EventText); got != "Hello, world!" {
		t.Errorf("streamed text %q", got)
	}
	if got := resp.Message.Text(); got != "Hello, world!" {
		t.Errorf("response text %q", got)
	}
	if resp.Message.Role != llm.RoleAssistant {
		t.Errorf("role %q", resp.Message.Role)
	}
	if resp.Stop != llm.StopEnd || resp.RawStop != "end_turn" {
		t.Errorf("stop %q raw %q", resp.Stop, resp.RawStop)
	}
	if resp.Model != "claude-sonnet-4-5-20250929" {
		t.Errorf("model %q", resp.Model)
	}
	want := llm.Usage{InputTokens: 25, OutputTokens: 15, CacheReadTokens: 12}
	if resp.Usage != want {
		t.Errorf("usage %+v, want %+v", resp.Usage, want)
	}
	// Usage from message_start goes out just before the first text; the
	// final count with message_delta.
	wantKinds := []llm.EventKind{llm.EventUsage, llm.EventText, llm.EventText, llm.EventText, llm.EventUsage}
	if got := c.Kinds(); !reflect.DeepEqual(got, wantKinds) {
		t.Errorf("event kinds %v, want %v", got, wantKinds)
	}
	usage := c.Of(llm.EventUsage)
	if first := *usage[0].Usage; first.OutputTokens != 1 || first.InputTokens != 25 {
		t.Errorf("first usage event %+v", first)
	}
	if last := *usage[len(usage)-1].Usage; last != want {
		t.Errorf("last usage event %+v", last)
	}

	reqs := f.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/messages" {
		t.Fatalf("requests %+v", reqs)
	}
	var body map[string]any
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["stream"] != true || body["model"] != "claude-sonnet-4-5" || body["max_tokens"] != float64(DefaultMaxTokens) {
		t.Errorf("body %s", reqs[0].Body)
	}
}

func TestStreamToolCallInPieces(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "tool_pieces.sse"))
	p, _ := f.provider(llm.Config{})
	var c llmtest.Events
	resp, err := p.Stream(context.Background(), simpleRequest(), c.On)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if resp.Stop != llm.StopToolUse {
		t.Errorf("stop %q", resp.Stop)
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 1 {
		t.Fatalf("tool calls %+v", calls)
	}
	call := calls[0]
	if call.ID != "toolu_01PiecesA1b2C3d4E5f6G7h8" || call.Name != "get_weather" {
		t.Errorf("call %+v", call)
	}
	var input map[string]string
	if err := json.Unmarshal(call.Input, &input); err != nil {
		t.Fatalf("input %s: %v", call.Input, err)
	}
	if input["city"] != "Paris" || input["unit"] != "celsius" {
		t.Errorf("input %s", call.Input)
	}
	if got := c.Text(llm.EventToolDelta); got != string(call.Input) {
		t.Errorf("tool deltas %q, want the pieces of %s", got, call.Input)
	}
	if n := len(c.Of(llm.EventToolDelta)); n != 3 {
		t.Errorf("%d tool deltas, want 3 (the empty piece is not an event)", n)
	}
	starts, ends := c.Of(llm.EventToolStart), c.Of(llm.EventToolEnd)
	if len(starts) != 1 || starts[0].ToolCall.Name != "get_weather" || starts[0].Index != 1 {
		t.Errorf("tool_start events %+v", starts)
	}
	if len(ends) != 1 || !bytes.Equal(ends[0].ToolCall.Input, call.Input) || ends[0].Index != 1 {
		t.Errorf("tool_end events %+v", ends)
	}
	if got := resp.Message.Text(); got != "Let me look up the weather in Paris." {
		t.Errorf("text %q", got)
	}
	if resp.Message.Parts[0].Text == "" || resp.Message.Parts[1].ToolCall == nil {
		t.Errorf("parts out of order: %+v", resp.Message.Parts)
	}
}

func TestStreamParallelToolCalls(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "parallel_tools.sse"))
	p, _ := f.provider(llm.Config{})
	var c llmtest.Events
	resp, err := p.Stream(context.Background(), simpleRequest(), c.On)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 2 {
		t.Fatalf("tool calls %+v", calls)
	}
	if calls[0].ID != "toolu_01ParallelFirst" || string(calls[0].Input) != `{"path": "go.mod"}` {
		t.Errorf("first call %+v (%s)", calls[0], calls[0].Input)
	}
	if calls[1].ID != "toolu_01ParallelSecond" || string(calls[1].Input) != `{}` {
		t.Errorf("second call %+v (%s): empty input must be {}", calls[1], calls[1].Input)
	}
	ends := c.Of(llm.EventToolEnd)
	if len(ends) != 2 || ends[0].Index != 0 || ends[1].Index != 1 {
		t.Errorf("tool_end events %+v", ends)
	}
	if resp.Usage.OutputTokens != 71 || resp.Usage.InputTokens != 610 {
		t.Errorf("usage %+v", resp.Usage)
	}
}

// TestFollowUpRequestBody runs a thinking + parallel tool turn, sends the
// answer back with tool results and checks the exact body the API got.
func TestFollowUpRequestBody(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "thinking_tools.sse"), sse(t, "text.sse"))
	p, _ := f.provider(llm.Config{Model: "claude-sonnet-4-5"})
	tools := []llm.Tool{{
		Name:        "get_weather",
		Description: "Current weather for a city.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`),
	}}
	first := &llm.Request{
		System:    "You are a careful assistant.",
		Messages:  []llm.Message{userText("What's the weather in Paris and London?")},
		Tools:     tools,
		MaxTokens: 1024,
	}
	var c llmtest.Events
	resp, err := p.Stream(context.Background(), first, c.On)
	if err != nil {
		t.Fatalf("first Stream: %v", err)
	}
	if got := c.Text(llm.EventThinking); got != "The user wants two cities. Both lookups are independent, so call them together." {
		t.Errorf("thinking events %q", got)
	}
	if th := resp.Message.Parts[0]; th.Signature != "EqQBCgIYAhIMfixtureSigPart1Part2==" || th.Thinking == "" {
		t.Errorf("thinking part %+v", th)
	}
	if rd := resp.Message.Parts[1]; rd.Thinking != "" || rd.Signature != "EmwKAhgBEgy3va3pzix/LafPsn4aDFixtureRedactedData" {
		t.Errorf("redacted thinking part %+v", rd)
	}
	wantUsage := llm.Usage{InputTokens: 812, OutputTokens: 164, CacheCreateTokens: 300}
	if resp.Usage != wantUsage {
		t.Errorf("usage %+v", resp.Usage)
	}

	calls := resp.Message.ToolCalls()
	second := &llm.Request{
		System: first.System,
		Messages: []llm.Message{
			first.Messages[0],
			resp.Message,
			{Role: llm.RoleTool, Parts: []llm.Part{
				{ToolResult: &llm.ToolResult{CallID: calls[0].ID, Name: calls[0].Name, Content: "18°C, sunny"}},
				{ToolResult: &llm.ToolResult{CallID: calls[1].ID, Name: calls[1].Name, Content: "weather service unavailable", IsError: true}},
			}},
			userText("Answer in Celsius."),
		},
		Tools:     tools,
		MaxTokens: 1024,
	}
	if _, err := p.Stream(context.Background(), second, nil); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	reqs := f.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	assertJSONEqual(t, reqs[1].Body, []byte(llmtest.Fixture(t, "followup_request.json")))
}

func assertJSONEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got: %v", err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		gi, _ := json.MarshalIndent(g, "", "  ")
		wi, _ := json.MarshalIndent(w, "", "  ")
		t.Errorf("request body\n%s\nwant\n%s", gi, wi)
	}
}

func TestStopReasons(t *testing.T) {
	t.Parallel()
	base := llmtest.Fixture(t, "text.sse")
	for raw, want := range map[string]llm.StopReason{
		"end_turn":                      llm.StopEnd,
		"stop_sequence":                 llm.StopEnd,
		"tool_use":                      llm.StopToolUse,
		"max_tokens":                    llm.StopMaxTokens,
		"refusal":                       llm.StopRefusal,
		"pause_turn":                    llm.StopOther,
		"model_context_window_exceeded": llm.StopOther,
	} {
		t.Run(raw, func(t *testing.T) {
			t.Parallel()
			body := strings.Replace(base, `"stop_reason":"end_turn"`, `"stop_reason":"`+raw+`"`, 1)
			f := newFakeServer(t, llmtest.Reply{Body: body})
			p, _ := f.provider(llm.Config{})
			resp, err := p.Stream(context.Background(), simpleRequest(), nil)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if resp.Stop != want || resp.RawStop != raw {
				t.Errorf("stop %q raw %q, want %q", resp.Stop, resp.RawStop, want)
			}
		})
	}
}

func TestMaxTokensCutsToolCall(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "max_tokens_cut_tool.sse"))
	p, _ := f.provider(llm.Config{})
	var c llmtest.Events
	resp, err := p.Stream(context.Background(), simpleRequest(), c.On)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if resp.Stop != llm.StopMaxTokens {
		t.Errorf("stop %q", resp.Stop)
	}
	if calls := resp.Message.ToolCalls(); len(calls) != 0 {
		t.Errorf("a call cut mid-JSON must be dropped, got %+v", calls)
	}
	if len(c.Of(llm.EventToolEnd)) != 0 {
		t.Errorf("tool_end sent for an incomplete call")
	}
	if resp.Message.Text() != "Writing the file now." {
		t.Errorf("text %q", resp.Message.Text())
	}
}

func TestRetryAfter429(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t,
		jsonAnswer(t, http.StatusTooManyRequests, map[string]string{"retry-after": "7"}, "error_rate_limit.json"),
		jsonAnswer(t, http.StatusTooManyRequests, map[string]string{"retry-after-ms": "1500", "retry-after": "2"}, "error_rate_limit.json"),
		sse(t, "text.sse"),
	)
	p, waits := f.provider(llm.Config{})
	resp, err := p.Stream(context.Background(), simpleRequest(), nil)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if resp.Message.Text() != "Hello, world!" {
		t.Errorf("text %q", resp.Message.Text())
	}
	if n := len(f.Requests()); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
	want := []time.Duration{7 * time.Second, 1500 * time.Millisecond}
	if got := waits.All(); !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v (retry-after, then retry-after-ms first)", got, want)
	}
}

func TestRetryOverloaded529(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t,
		jsonAnswer(t, 529, nil, "error_overloaded.json"),
		jsonAnswer(t, 529, nil, "error_overloaded.json"),
		sse(t, "text.sse"),
	)
	p, waits := f.provider(llm.Config{}, llm.WithBackoff(100*time.Millisecond, time.Second))
	if _, err := p.Stream(context.Background(), simpleRequest(), nil); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	// Exponential, with the fixed test jitter taking 12.5% off.
	want := []time.Duration{87500 * time.Microsecond, 175 * time.Millisecond}
	if got := waits.All(); !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	h := jsonAnswer(t, 529, nil, "error_overloaded.json")
	f := newFakeServer(t, h, h, h)
	p, _ := f.provider(llm.Config{MaxRetries: 2})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	e := asLLMError(t, err)
	if e.Status != 529 || e.Code != "overloaded_error" || !e.Retryable || e.Message != "Overloaded" {
		t.Errorf("error %+v", e)
	}
	if n := len(f.Requests()); n != 3 {
		t.Errorf("%d attempts, want 1 + 2 retries", n)
	}
}

func TestRetryAfterTooLongIsReturned(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, jsonAnswer(t, http.StatusTooManyRequests, map[string]string{"retry-after": "3600"}, "error_rate_limit.json"))
	p, waits := f.provider(llm.Config{})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	e := asLLMError(t, err)
	if e.Status != 429 || e.Code != "rate_limit_error" || e.RetryAfter != time.Hour || !e.Retryable {
		t.Errorf("error %+v", e)
	}
	if len(waits.All()) != 0 {
		t.Errorf("waited %v for an hour-long retry-after", waits.All())
	}
}

func TestConnectionErrorBeforeFirstEventRetried(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, dropConnection(t), sse(t, "truncated.sse"), sse(t, "text.sse"))
	p, waits := f.provider(llm.Config{})
	resp, err := p.Stream(context.Background(), simpleRequest(), nil)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if resp.Message.Text() != "Hello, world!" {
		t.Errorf("text %q", resp.Message.Text())
	}
	if n := len(f.Requests()); n != 3 {
		t.Errorf("%d attempts, want 3 (dropped, truncated, whole)", n)
	}
	if len(waits.All()) != 2 {
		t.Errorf("waits %v", waits.All())
	}
}

func TestOverloadedEventBeforeContentRetried(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "error_after_start.sse"), sse(t, "text.sse"))
	p, _ := f.provider(llm.Config{})
	var c llmtest.Events
	resp, err := p.Stream(context.Background(), simpleRequest(), c.On)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if n := len(f.Requests()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
	// Nothing from the failed attempt reached the caller.
	if got := len(c.Of(llm.EventUsage)); got != 2 || resp.Usage.OutputTokens != 15 {
		t.Errorf("%d usage events, usage %+v", got, resp.Usage)
	}
}

func TestErrorMidStreamNotRetried(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, sse(t, "error_midstream.sse"), sse(t, "text.sse"))
	p, waits := f.provider(llm.Config{})
	var c llmtest.Events
	_, err := p.Stream(context.Background(), simpleRequest(), c.On)
	e := asLLMError(t, err)
	if e.Code != "overloaded_error" || e.Message != "Overloaded" || e.Status != 0 || !e.Retryable {
		t.Errorf("error %+v", e)
	}
	if got := c.Text(llm.EventText); got != "Partial answ" {
		t.Errorf("text before the error %q", got)
	}
	if n := len(f.Requests()); n != 1 {
		t.Errorf("%d attempts: output was shown, so no retry", n)
	}
	if len(waits.All()) != 0 {
		t.Errorf("waits %v", waits.All())
	}
}

func TestPromptTooLongIsContextOverflow(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, jsonAnswer(t, http.StatusBadRequest, nil, "error_prompt_too_long.json"))
	p, _ := f.provider(llm.Config{})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	e := asLLMError(t, err)
	if !llm.IsContextOverflow(err) || e.Status != 400 || e.Code != "invalid_request_error" || e.Retryable {
		t.Errorf("error %+v", e)
	}
	if !strings.Contains(e.Message, "prompt is too long") {
		t.Errorf("message %q", e.Message)
	}
	if n := len(f.Requests()); n != 1 {
		t.Errorf("%d attempts", n)
	}
}

func TestInvalidRequestNotOverflow(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, jsonAnswer(t, http.StatusBadRequest, nil, "error_invalid_request.json"))
	p, _ := f.provider(llm.Config{})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	e := asLLMError(t, err)
	if e.ContextOverflow || e.Retryable || e.Status != 400 {
		t.Errorf("error %+v", e)
	}
}

func TestErrorNeverCarriesKey(t *testing.T) {
	t.Parallel()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		llmtest.Reply{Status: http.StatusUnauthorized,
			Body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: ` + r.Header.Get("x-api-key") + `"}}`}.ServeHTTP(w, r)
	})
	f := newFakeServer(t, echo)
	p, _ := f.provider(llm.Config{})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	e := asLLMError(t, err) // fails on the key
	if e.Status != 401 || e.Code != "authentication_error" || e.Retryable {
		t.Errorf("error %+v", e)
	}
	if !strings.Contains(e.Message, "[redacted]") {
		t.Errorf("message %q", e.Message)
	}
}

func TestPerRequestTimeout(t *testing.T) {
	t.Parallel()
	hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	f := newFakeServer(t, hang, hang)
	p, waits := f.provider(llm.Config{Timeout: 50 * time.Millisecond, MaxRetries: 1})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	e := asLLMError(t, err)
	if e.Code != "timeout" || !e.Retryable {
		t.Errorf("error %+v", e)
	}
	if n := len(f.Requests()); n != 2 || len(waits.All()) != 1 {
		t.Errorf("%d attempts, waits %v", n, waits.All())
	}
}

// TestCancelMidStream cancels while the server holds the stream open: Stream
// returns ctx's error, the connection is closed and no goroutine is left.
func TestCancelMidStream(t *testing.T) {
	// Not parallel: it counts goroutines.
	before := runtime.NumGoroutine()
	disconnected := make(chan struct{})
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		head, _, _ := strings.Cut(llmtest.Fixture(t, "text.sse"), "event: content_block_delta")
		head += "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n"
		w.Write([]byte(head)) //nolint:errcheck // the test fails elsewhere if this does not arrive
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(disconnected)
		case <-time.After(10 * time.Second):
			t.Errorf("fake server: client never went away")
		}
	})
	f := newFakeServer(t, hold)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	client := &http.Client{Transport: transport}
	p, waits := f.provider(llm.Config{}, llm.WithHTTPClient(client))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Stream(ctx, simpleRequest(), func(ev llm.Event) {
			if ev.Kind == llm.EventText {
				cancel()
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || err != ctx.Err() {
			t.Errorf("Stream returned %v, want ctx.Err()", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancel")
	}
	select {
	case <-disconnected:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection stayed open after cancel")
	}
	if len(waits.All()) != 0 || len(f.Requests()) != 1 {
		t.Errorf("retried after cancel: %d requests", len(f.Requests()))
	}
	f.Close()
	transport.CloseIdleConnections()
	waittest.Until(30*time.Second, func() bool { return runtime.NumGoroutine() <= before })
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, jsonAnswer(t, 529, map[string]string{"retry-after": "30"}, "error_overloaded.json"))
	cfg := llm.Config{BaseURL: f.URL, KeyEnv: testKeyEnv, Model: "claude-sonnet-4-5"}
	p, err := New(cfg) // the real sleep
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = p.Stream(ctx, simpleRequest(), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stream returned %v, want ctx's deadline", err)
	}
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	_, err := New(llm.Config{KeyEnv: "CORTEX_ANTHROPIC_TEST_UNSET_KEY", Model: "m"})
	if err == nil || !strings.Contains(err.Error(), "CORTEX_ANTHROPIC_TEST_UNSET_KEY") {
		t.Errorf("New without a key: %v", err)
	}
}

func TestMissingModel(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	p, _ := f.provider(llm.Config{})
	p.model = ""
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	if e := asLLMError(t, err); e.Code != "invalid_request" {
		t.Errorf("error %+v", e)
	}
	if len(f.Requests()) != 0 {
		t.Errorf("a request without a model was sent")
	}
}

func TestCountTokens(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t,
		jsonAnswer(t, 529, map[string]string{"retry-after-ms": "20"}, "error_overloaded.json"),
		jsonAnswer(t, http.StatusOK, nil, "count_tokens.json"),
	)
	p, waits := f.provider(llm.Config{})
	req := simpleRequest()
	req.Tools = []llm.Tool{{Name: "ls", Description: "List a directory.", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}}
	n, err := p.CountTokens(context.Background(), req)
	if err != nil {
		t.Fatalf("CountTokens: %v", err)
	}
	if n != 2095 {
		t.Errorf("count %d", n)
	}
	if got := waits.All(); !reflect.DeepEqual(got, []time.Duration{20 * time.Millisecond}) {
		t.Errorf("waits %v", got)
	}
	reqs := f.Requests()
	if len(reqs) != 2 || reqs[1].Path != "/v1/messages/count_tokens" {
		t.Fatalf("requests %+v", reqs)
	}
	assertJSONEqual(t, reqs[1].Body, []byte(`{
		"model": "claude-sonnet-4-5",
		"system": [{"type": "text", "text": "Be brief."}],
		"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
		"tools": [{"name": "ls", "description": "List a directory.", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
	}`))
}

func TestMapMessagesMerging(t *testing.T) {
	t.Parallel()
	msgs := []llm.Message{
		userText("one"),
		userText("two"),
		{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: ""}}}, // empty: dropped
		userText("three"),
		{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: "t1", Name: "ls"}}}},
		userText("interjection"),
		{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{CallID: "t1", Content: ""}}}},
	}
	params, err := mapMessages(msgs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, got, []byte(`[
		{"role": "user", "content": [
			{"type": "text", "text": "one"}, {"type": "text", "text": "two"}, {"type": "text", "text": "three"}]},
		{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
		{"role": "user", "content": [
			{"type": "tool_result", "tool_use_id": "t1", "is_error": false},
			{"type": "text", "text": "interjection"}]}
	]`))
}

func TestMalformedEventNotRetried(t *testing.T) {
	t.Parallel()
	body := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{not json}\n\n"
	f := newFakeServer(t, llmtest.Reply{Body: body}, sse(t, "text.sse"))
	p, _ := f.provider(llm.Config{})
	_, err := p.Stream(context.Background(), simpleRequest(), nil)
	if e := asLLMError(t, err); e.Code != "protocol_error" || e.Retryable {
		t.Errorf("error %+v", e)
	}
	if n := len(f.Requests()); n != 1 {
		t.Errorf("%d attempts", n)
	}
}
