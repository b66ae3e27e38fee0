package providers

import (
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/anthropic"
	"github.com/nsys-cortex/cortex/internal/llm/gemini"
	"github.com/nsys-cortex/cortex/internal/llm/openai"
)

func TestNewChoosesByProvider(t *testing.T) {
	t.Setenv("CORTEX_TEST_KEY", "test-key")
	for _, tc := range []struct {
		provider string
		check    func(llm.Provider) bool
	}{
		{"anthropic", func(p llm.Provider) bool { _, ok := p.(*anthropic.Provider); return ok }},
		{"gemini", func(p llm.Provider) bool { _, ok := p.(*gemini.Provider); return ok }},
		{"openai", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
		{"ollama", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
		{"vllm", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
		{"lmstudio", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
		{"sglang", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
		{"grok", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
		{"mistral", func(p llm.Provider) bool { _, ok := p.(*openai.Provider); return ok }},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			p, err := New(llm.Config{Provider: tc.provider, Model: "m", KeyEnv: "CORTEX_TEST_KEY"})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(p) || p.Name() != tc.provider {
				t.Errorf("got %T named %q", p, p.Name())
			}
		})
	}
	p, err := New(llm.Config{Provider: "openai-compatible", Model: "m", BaseURL: "http://10.0.0.7:8080/v1"})
	if err != nil || p.Name() != "openai-compatible" {
		t.Errorf("openai-compatible: %v, %v", p, err)
	}
}

func TestNewErrors(t *testing.T) {
	t.Setenv("GEMINI_API_KEY", "")
	t.Setenv("GOOGLE_API_KEY", "")
	for _, tc := range []struct {
		cfg  llm.Config
		want []string
	}{
		{llm.Config{Provider: "nope", Model: "m"}, []string{`unknown provider "nope"`, "anthropic", "gemini", "ollama", "openai-compatible"}},
		{llm.Config{Model: "m"}, []string{"no provider", "anthropic"}},
		{llm.Config{Provider: "ollama"}, []string{"no model"}},
		{llm.Config{Provider: "gemini", Model: "gemini-2.5-flash"}, []string{"GEMINI_API_KEY"}},
	} {
		p, err := New(tc.cfg)
		if p != nil {
			t.Errorf("New(%+v) returned a provider with its error", tc.cfg)
		}
		if err == nil {
			t.Errorf("New(%+v) succeeded", tc.cfg)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%+v) = %q, want it to mention %q", tc.cfg, err, w)
			}
		}
	}
}
