package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	usages := 0
	for _, e := range rec.All() {
		switch e.Kind {
		case llm.EventText:
			text += e.Text
		case llm.EventUsage:
			usages++
		}
	}
	if text != "The build passes now." || resp.Message.Text() != text || len(resp.Message.Parts) != 1 {
		t.Errorf("streamed %q, response %+v", text, resp.Message)
	}
	if resp.Stop != llm.StopEnd || resp.RawStop != "STOP" {
		t.Errorf("stop = %s (%s)", resp.Stop, resp.RawStop)
	}
	want := llm.Usage{InputTokens: 31, OutputTokens: 17, CacheReadTokens: 10}
	if resp.Usage != want || usages != 2 {
		t.Errorf("usage = %+v after %d usage events, want %+v after 2", resp.Usage, usages, want)
	}
	if resp.Model != "gemini-2.5-flash" {
		t.Errorf("model = %q", resp.Model)
	}
	if f.Requests()[0].Header.Get("X-Goog-Api-Key") != "gm-test-key" {
		t.Errorf("x-goog-api-key = %q", f.Requests()[0].Header.Get("X-Goog-Api-Key"))
	}
	if f.Requests()[0].URI != "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse" {
		t.Errorf("path = %q", f.Requests()[0].URI)
	}
}

func TestStreamFunctionCalls(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "function_calls.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	var rec llmtest.Events
	resp, err := p.Stream(context.Background(), userRequest("read go.mod and run the tests"), rec.On)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds := []llm.EventKind{llm.EventText, llm.EventUsage,
		llm.EventToolStart, llm.EventToolDelta, llm.EventToolEnd,
		llm.EventToolStart, llm.EventToolDelta, llm.EventToolEnd, llm.EventUsage}
	if got := rec.Kinds(); !reflect.DeepEqual(got, wantKinds) {
		t.Errorf("events = %v\nwant %v", got, wantKinds)
	}
	wantCalls := []llm.ToolCall{
		{ID: "gemini_call_0", Name: "read_file", Input: json.RawMessage(`{"path":"go.mod"}`)},
		{ID: "gemini_call_1", Name: "run", Input: json.RawMessage(`{"cmd":["go","test","./..."]}`)},
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 2 {
		t.Fatalf("calls = %+v", calls)
	}
	for i, c := range calls {
		if c.ID != wantCalls[i].ID || c.Name != wantCalls[i].Name || string(c.Input) != string(wantCalls[i].Input) {
			t.Errorf("call %d = %+v (%s)", i, c, c.Input)
		}
	}
	for _, e := range rec.All() {
		if e.Kind == llm.EventText && e.Index != 0 {
			t.Errorf("text event at %d, want 0", e.Index)
		}
		if e.Kind == llm.EventToolEnd && string(e.ToolCall.Input) != string(wantCalls[e.Index-1].Input) {
			t.Errorf("tool_end %d = %s", e.Index, e.ToolCall.Input)
		}
	}
	parts := resp.Message.Parts
	if len(parts) != 3 || parts[0].Text != "Checking both." || parts[0].Signature != "c2lnLXRleHQ=" ||
		parts[1].Signature != "c2lnLWNhbGwtMQ==" || parts[2].Signature != "" {
		t.Errorf("parts = %+v", parts)
	}
	if resp.Stop != llm.StopToolUse || resp.RawStop != "STOP" {
		t.Errorf("stop = %s (%s)", resp.Stop, resp.RawStop)
	}
	if resp.Usage != (llm.Usage{InputTokens: 120, OutputTokens: 30}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestCallIDFromAPIKept(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "call_with_id.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	resp, err := p.Stream(context.Background(), userRequest("list"), nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 1 || calls[0].ID != "fc_7f3a" || string(calls[0].Input) != "{}" {
		t.Fatalf("calls = %+v", calls)
	}
	if resp.Usage != (llm.Usage{}) {
		t.Errorf("usage without usageMetadata = %+v", resp.Usage)
	}
}

// oneChunk is a stream of one candidate chunk.
func oneChunk(parts, finish string) string {
	return fmt.Sprintf("data: {\"candidates\": [{\"content\": {\"parts\": [%s],\"role\": \"model\"},\"finishReason\": %q,\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\"}\n\n", parts, finish)
}

func TestStopReasons(t *testing.T) {
	text := `{"text": "x"}`
	call := `{"functionCall": {"name": "f", "args": {}}}`
	for _, tc := range []struct {
		parts, finish string
		want          llm.StopReason
	}{
		{text, "STOP", llm.StopEnd},
		{call, "STOP", llm.StopToolUse},
		{text, "MAX_TOKENS", llm.StopMaxTokens},
		{text, "SAFETY", llm.StopRefusal},
		{text, "RECITATION", llm.StopRefusal},
		{text, "PROHIBITED_CONTENT", llm.StopRefusal},
		{text, "BLOCKLIST", llm.StopRefusal},
		{text, "MALFORMED_FUNCTION_CALL", llm.StopOther},
	} {
		t.Run(tc.finish+"/"+string(tc.want), func(t *testing.T) {
			f := llmtest.Serve(t, llmtest.Reply{Body: oneChunk(tc.parts, tc.finish)})
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
	t.Run("prompt blocked", func(t *testing.T) {
		f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "prompt_blocked.sse")})
		p, _ := newTestProvider(t, f, llm.Config{})
		resp, err := p.Stream(context.Background(), userRequest("go"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Stop != llm.StopRefusal || resp.RawStop != "PROHIBITED_CONTENT" {
			t.Errorf("stop = %s (%s)", resp.Stop, resp.RawStop)
		}
	})
}

func followUp() *llm.Request {
	temp := 0.2
	return &llm.Request{
		System:      "You are a careful engineer.",
		MaxTokens:   1024,
		Temperature: &temp,
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{{Text: "Run the tests and read go.mod."}}},
			{Role: llm.RoleAssistant, Parts: []llm.Part{
				{Text: "Checking both.", Signature: "c2lnLXRleHQ="},
				{ToolCall: &llm.ToolCall{ID: "gemini_call_0", Name: "read_file", Input: json.RawMessage(`{"path":"go.mod"}`)}, Signature: "c2lnLWNhbGwtMQ=="},
				{ToolCall: &llm.ToolCall{ID: "fc_run", Name: "run", Input: json.RawMessage(`{"cmd":["go","test","./..."]}`)}},
			}},
			{Role: llm.RoleTool, Parts: []llm.Part{
				{ToolResult: &llm.ToolResult{CallID: "gemini_call_0", Content: "module example.com/demo\n"}},
				{ToolResult: &llm.ToolResult{CallID: "fc_run", Name: "run", Content: "exit status 1", IsError: true}},
			}},
		},
		Tools: []llm.Tool{
			{Name: "read_file", Description: "Read a file.", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
			{Name: "run", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"array","items":{"type":"string"}}},"required":["cmd"]}`)},
		},
	}
}

func TestFollowUpRequestBody(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
	p, _ := newTestProvider(t, f, llm.Config{})
	if _, err := p.Stream(context.Background(), followUp(), nil); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, f.Last().Body, llmtest.Fixture(t, "followup_request.json"))
}

func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("request body:\n%s\nwant:\n%s", got, want)
	}
}

func TestCountTokens(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Status: 200, Body: `{"totalTokens": 187, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 187}]}`})
	p, _ := newTestProvider(t, f, llm.Config{})
	n, err := p.CountTokens(context.Background(), followUp())
	if err != nil || n != 187 {
		t.Fatalf("CountTokens = %d, %v", n, err)
	}
	if f.Requests()[0].URI != "/v1beta/models/gemini-2.5-flash:countTokens" || f.Requests()[0].Header.Get("X-Goog-Api-Key") != "gm-test-key" {
		t.Errorf("path %q key %q", f.Requests()[0].URI, f.Requests()[0].Header.Get("X-Goog-Api-Key"))
	}
	assertJSON(t, f.Last().Body, llmtest.Fixture(t, "count_request.json"))

	f = llmtest.Serve(t, llmtest.Reply{Status: 400, Body: llmtest.Fixture(t, "overflow.json")})
	p, _ = newTestProvider(t, f, llm.Config{})
	if _, err := p.CountTokens(context.Background(), followUp()); !llm.IsContextOverflow(err) {
		t.Errorf("err = %v, want a context overflow", err)
	}
}

func TestRateLimitThenSuccess(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"RetryInfo", nil, 7 * time.Second},
		{"Retry-After", map[string]string{"Retry-After": "3"}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
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

func TestUnavailableRetriedThenExhausted(t *testing.T) {
	f := llmtest.Serve(t, llmtest.Reply{Status: 503, Body: llmtest.Fixture(t, "unavailable.json")}, llmtest.Reply{Status: 500, Body: `{"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}}`}, llmtest.Reply{Body: llmtest.Fixture(t, "text.sse")})
	p, s := newTestProvider(t, f, llm.Config{})
	if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	if f.Count() != 3 || len(s.All()) != 2 {
		t.Errorf("attempts = %d, sleeps = %v", f.Count(), s.All())
	}
	for i, d := range s.All() {
		hi := baseBackoff << i
		if d < hi/2 || d > hi {
			t.Errorf("sleep %d = %v, want within [%v, %v]", i, d, hi/2, hi)
		}
	}

	f = llmtest.Serve(t, llmtest.Reply{Status: 503, Body: llmtest.Fixture(t, "unavailable.json")})
	p, s = newTestProvider(t, f, llm.Config{MaxRetries: 1})
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	var le *llm.Error
	if !errors.As(err, &le) || le.Status != 503 || le.Code != "UNAVAILABLE" || !le.Retryable || !strings.Contains(le.Message, "overloaded") {
		t.Fatalf("err = %#v", err)
	}
	if f.Count() != 2 || len(s.All()) != 1 {
		t.Errorf("attempts = %d, sleeps = %v", f.Count(), s.All())
	}
}

func TestNotRetried(t *testing.T) {
	for _, tc := range []struct {
		body     string
		overflow bool
	}{
		{"overflow.json", true},
		{"bad_key.json", false},
	} {
		t.Run(tc.body, func(t *testing.T) {
			f := llmtest.Serve(t, llmtest.Reply{Status: 400, Body: llmtest.Fixture(t, tc.body)})
			p, _ := newTestProvider(t, f, llm.Config{})
			_, err := p.Stream(context.Background(), userRequest("hi"), nil)
			var le *llm.Error
			if !errors.As(err, &le) || le.Status != 400 || le.Code != "INVALID_ARGUMENT" || le.Retryable {
				t.Fatalf("err = %#v", err)
			}
			if llm.IsContextOverflow(err) != tc.overflow || f.Count() != 1 {
				t.Errorf("overflow = %v after %d attempts", llm.IsContextOverflow(err), f.Count())
			}
			if strings.Contains(err.Error(), "gm-test-key") {
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
	if !errors.As(err, &le) || le.Code != "UNAVAILABLE" || le.Status != 503 {
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
	first := strings.SplitAfter(llmtest.Fixture(t, "text.sse"), "\r\n\r\n")[0]
	llmtest.CancelMidStream(t, first, testProvider(t))
}

func TestKeyAndConfig(t *testing.T) {
	t.Setenv("GEMINI_API_KEY", "")
	t.Setenv("GOOGLE_API_KEY", "")
	t.Setenv("CORTEX_TEST_EMPTY", "")
	t.Setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")                          // genai's own variables: ignored
	t.Setenv("GOOGLE_GEMINI_BASE_URL", "http://must-not-be-used.invalid/") // likewise
	for _, tc := range []struct {
		cfg  llm.Config
		want string
	}{
		{llm.Config{Provider: "gemini", Model: "gemini-2.5-flash"}, "GEMINI_API_KEY"},
		{llm.Config{Provider: "gemini", Model: "gemini-2.5-flash", KeyEnv: "CORTEX_TEST_EMPTY"}, "CORTEX_TEST_EMPTY"},
		{llm.Config{Provider: "gemini"}, "no model"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}

	t.Setenv("GOOGLE_API_KEY", "google-fallback")
	rt := &roundTripper{}
	p, err := New(llm.Config{Provider: "gemini", Model: "gemini-2.5-flash"}, llm.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	if len(rt.reqs) != 1 || rt.reqs[0].URL.String() != "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse" ||
		rt.reqs[0].Header.Get("x-goog-api-key") != "google-fallback" {
		t.Errorf("requests = %+v", rt.reqs)
	}
	t.Setenv("GEMINI_API_KEY", "gemini-first")
	p, err = New(llm.Config{Provider: "gemini", Model: "gemini-2.5-flash"}, llm.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	if p.key != "gemini-first" {
		t.Error("GEMINI_API_KEY does not win over GOOGLE_API_KEY")
	}
}

// roundTripper answers every request with an empty stream and records it.
type roundTripper struct{ reqs []*http.Request }

func (r *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r.reqs = append(r.reqs, req)
	return &http.Response{
		StatusCode: 200,
		Header:     http.Header{"Content-Type": []string{"text/event-stream"}},
		Body:       io.NopCloser(strings.NewReader(oneChunk(`{"text": "ok"}`, "STOP"))),
		Request:    req,
	}, nil
}

func TestCutStreamIsAnError(t *testing.T) {
	cut := strings.SplitAfter(llmtest.Fixture(t, "text.sse"), "\r\n\r\n")[0]
	f := llmtest.Serve(t, llmtest.Reply{Body: cut})
	p, _ := newTestProvider(t, f, llm.Config{})
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != "incomplete_stream" || f.Count() != 1 {
		t.Fatalf("err = %v after %d attempts", err, f.Count())
	}
}

// Turns of one role in a row (tool results, then the next request) are one
// turn on the wire: the API wants user and model turns to alternate.
func TestConsecutiveTurnsMerge(t *testing.T) {
	call := &llm.ToolCall{ID: "c1", Name: "ls", Input: json.RawMessage(`{}`)}
	got, err := contents([]llm.Message{
		{Role: llm.RoleUser, Parts: []llm.Part{{Text: "list"}}},
		{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: call}}},
		{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{CallID: "c1", Content: "a b"}}}},
		{Role: llm.RoleUser, Parts: []llm.Part{{Text: "and now?"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, c := range got {
		roles = append(roles, c.Role)
	}
	if !reflect.DeepEqual(roles, []string{"user", "model", "user"}) || len(got[2].Parts) != 2 ||
		got[2].Parts[0].FunctionResponse == nil || got[2].Parts[1].Text != "and now?" {
		t.Fatalf("turns %q, last %+v", roles, got[2].Parts)
	}
}
