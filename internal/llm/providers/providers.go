// Package providers builds an llm.Provider from configuration. It is the
// one place that knows every vendor package; package llm cannot, since the
// vendors import it.
package providers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/anthropic"
	"github.com/nsys-cortex/cortex/internal/llm/gemini"
	"github.com/nsys-cortex/cortex/internal/llm/openai"
)

// Names lists the provider names New accepts, sorted.
func Names() []string {
	names := append([]string{"anthropic", "gemini"}, openai.Names()...)
	slices.Sort(names)
	return names
}

// New builds the provider cfg.Provider names, with cfg.Model, cfg.BaseURL
// and the key from the environment variable cfg.KeyEnv (or the vendor's
// default).
func New(cfg llm.Config) (llm.Provider, error) {
	if cfg.Provider == "" {
		return nil, fmt.Errorf("llm: no provider configured (known: %s)", strings.Join(Names(), ", "))
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("llm: provider %s: no model configured", cfg.Provider)
	}
	switch {
	case cfg.Provider == "anthropic":
		return provider(anthropic.New(cfg))
	case cfg.Provider == "gemini":
		return provider(gemini.New(cfg))
	case slices.Contains(openai.Names(), cfg.Provider):
		return provider(openai.New(cfg))
	}
	return nil, fmt.Errorf("llm: unknown provider %q (known: %s)", cfg.Provider, strings.Join(Names(), ", "))
}

// provider keeps a failed constructor's nil pointer from becoming a
// non-nil llm.Provider.
func provider[P llm.Provider](p P, err error) (llm.Provider, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}
