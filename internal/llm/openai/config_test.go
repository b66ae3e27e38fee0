package openai

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// roundTripper answers every request with an empty stream and records its URL.
type roundTripper struct{ urls []string }

func (r *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r.urls = append(r.urls, req.URL.String())
	return &http.Response{
		StatusCode: 200,
		Header:     http.Header{"Content-Type": []string{"text/event-stream"}},
		Body:       io.NopCloser(strings.NewReader(chunkStream("ok", false, "stop"))),
		Request:    req,
	}, nil
}

func TestBaseURLDefaults(t *testing.T) {
	t.Setenv("XAI_API_KEY", "xai-test")
	t.Setenv("MISTRAL_API_KEY", "mistral-test")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("OPENAI_BASE_URL", "http://must-not-be-used.invalid/v1") // the SDK's variable: ignored
	for provider, want := range map[string]string{
		"openai":   "https://api.openai.com/v1/chat/completions",
		"ollama":   "http://127.0.0.1:11434/v1/chat/completions",
		"lmstudio": "http://127.0.0.1:1234/v1/chat/completions",
		"vllm":     "http://127.0.0.1:8000/v1/chat/completions",
		"sglang":   "http://127.0.0.1:30000/v1/chat/completions",
		"grok":     "https://api.x.ai/v1/chat/completions",
		"mistral":  "https://api.mistral.ai/v1/chat/completions",
	} {
		t.Run(provider, func(t *testing.T) {
			rt := &roundTripper{}
			p, err := New(llm.Config{Provider: provider, Model: "m"}, llm.WithHTTPClient(&http.Client{Transport: rt}))
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != provider {
				t.Errorf("Name = %q", p.Name())
			}
			if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
				t.Fatal(err)
			}
			if len(rt.urls) != 1 || rt.urls[0] != want {
				t.Errorf("requested %v, want %s", rt.urls, want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("XAI_API_KEY", "")
	t.Setenv("MISTRAL_API_KEY", "")
	t.Setenv("CORTEX_TEST_EMPTY", "")
	for _, tc := range []struct {
		cfg  llm.Config
		want string
	}{
		{llm.Config{Provider: "openai", Model: "gpt-4o"}, "OPENAI_API_KEY"},
		{llm.Config{Provider: "grok", Model: "grok-4"}, "XAI_API_KEY"},
		{llm.Config{Provider: "mistral", Model: "mistral-large-latest"}, "MISTRAL_API_KEY"},
		{llm.Config{Provider: "openai", Model: "gpt-4o", KeyEnv: "CORTEX_TEST_EMPTY"}, "CORTEX_TEST_EMPTY"},
		{llm.Config{Provider: "ollama", Model: "m", KeyEnv: "CORTEX_TEST_EMPTY"}, "CORTEX_TEST_EMPTY"},
		{llm.Config{Provider: "openai-compatible", Model: "m"}, "base URL"},
		{llm.Config{Provider: "ollama"}, "no model"},
		{llm.Config{Provider: "nope", Model: "m"}, "unknown provider"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	for _, cfg := range []llm.Config{
		{Provider: "ollama", Model: "m"},
		{Provider: "openai-compatible", Model: "m", BaseURL: "http://10.0.0.5:8080/v1"},
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

func TestCountTokens(t *testing.T) {
	p, err := New(llm.Config{Provider: "openai", Model: "gpt-4o", KeyEnv: testKeyEnv})
	if err != nil {
		t.Fatal(err)
	}
	short, err := p.CountTokens(context.Background(), userRequest("hello world"))
	if err != nil {
		t.Fatal(err)
	}
	// 3 framing + "user" (1) + "hello world" (2) + 3 for the reply.
	if short != 9 {
		t.Errorf("count = %d, want 9", short)
	}
	req := userRequest("hello world")
	req.System = "You are terse."
	long, err := p.CountTokens(context.Background(), req)
	if err != nil || long <= short {
		t.Errorf("with a system prompt: %d, %v", long, err)
	}
	local, err := New(llm.Config{Provider: "ollama", Model: "llama3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.CountTokens(context.Background(), req); err == nil {
		t.Error("counted tokens for a model with an unknown tokenizer")
	}
}
