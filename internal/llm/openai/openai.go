package openai

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/nsys-cortex/cortex/internal/llm"
)

const (
	defaultMaxRetries = 4
	defaultTimeout    = 10 * time.Minute
	openAIBaseURL     = "https://api.openai.com/v1"
	baseBackoff       = 500 * time.Millisecond
	maxBackoff        = 30 * time.Second
)

// retryBackoff is the wait before a retry the server named no delay for:
// exponential, with jitter over its upper half.
var retryBackoff = llm.Backoff{Base: baseBackoff, Max: maxBackoff, Jitter: 0.5}

// compat describes a provider name this package serves.
type compat struct {
	baseURL string // default base URL ("" : BaseURL must be configured)
	keyEnv  string // default key variable ("" : no key needed)
	local   bool   // a local server: speaks max_tokens, needs no key
}

var known = map[string]compat{
	"openai":            {baseURL: openAIBaseURL, keyEnv: "OPENAI_API_KEY"},
	"grok":              {baseURL: "https://api.x.ai/v1", keyEnv: "XAI_API_KEY"},
	"mistral":           {baseURL: "https://api.mistral.ai/v1", keyEnv: "MISTRAL_API_KEY"},
	"ollama":            {baseURL: "http://127.0.0.1:11434/v1", local: true},
	"lmstudio":          {baseURL: "http://127.0.0.1:1234/v1", local: true},
	"vllm":              {baseURL: "http://127.0.0.1:8000/v1", local: true},
	"sglang":            {baseURL: "http://127.0.0.1:30000/v1", local: true},
	"openai-compatible": {local: true},
}

// Names lists the provider names New accepts.
func Names() []string {
	return []string{"openai", "grok", "mistral", "ollama", "lmstudio", "vllm", "sglang", "openai-compatible"}
}

// DefaultBaseURL returns the base URL a provider name uses when none is
// configured ("" for openai-compatible, which needs one).
func DefaultBaseURL(provider string) string { return known[provider].baseURL }

// Provider streams chat completions from one OpenAI-compatible endpoint.
type Provider struct {
	name    string
	model   string
	baseURL string
	local   bool
	timeout time.Duration
	svc     sdk.ChatCompletionService
	policy  llm.RetryPolicy
}

var (
	_ llm.Provider     = (*Provider)(nil)
	_ llm.TokenCounter = (*Provider)(nil)
)

// New builds the provider cfg.Provider names ("openai", or a compatible
// server's name). The key is read from the environment variable cfg.KeyEnv
// names, or the provider's default; local servers need none.
func New(cfg llm.Config, opts ...llm.Option) (*Provider, error) {
	c, ok := known[cfg.Provider]
	if !ok {
		return nil, fmt.Errorf("openai: unknown provider %q (known: %s)", cfg.Provider, strings.Join(Names(), ", "))
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("%s: no model configured", cfg.Provider)
	}
	o := llm.NewOptions(retryBackoff, opts...)
	base := cfg.BaseURL
	if base == "" {
		base = c.baseURL
	}
	if base == "" {
		return nil, fmt.Errorf("%s: no base URL configured (set base_url to the server's /v1 endpoint)", cfg.Provider)
	}
	keyEnv := cfg.KeyEnv
	if keyEnv == "" {
		keyEnv = c.keyEnv
	}
	key := ""
	if keyEnv != "" {
		key = os.Getenv(keyEnv)
		// A local server may be fronted by a key the operator names; the
		// hosted APIs always need one.
		if key == "" && (!c.local || cfg.KeyEnv != "") {
			return nil, fmt.Errorf("%s: API key missing: set the environment variable %s", cfg.Provider, keyEnv)
		}
	}
	p := &Provider{
		name:    cfg.Provider,
		model:   cfg.Model,
		baseURL: strings.TrimRight(base, "/") + "/",
		local:   c.local,
		timeout: cfg.Timeout,
	}
	if p.timeout <= 0 {
		p.timeout = defaultTimeout
	}
	p.policy = llm.RetryPolicy{MaxRetries: cfg.MaxRetries, Timeout: p.timeout, Backoff: o.Backoff, Sleep: o.Sleep}
	if p.policy.MaxRetries == 0 {
		p.policy.MaxRetries = defaultMaxRetries
	}
	if p.policy.MaxRetries < 0 {
		p.policy.MaxRetries = 0
	}
	// NewChatCompletionService, unlike NewClient, reads nothing from the
	// environment: the base URL and key are exactly what we configured.
	sdkOpts := []option.RequestOption{
		option.WithBaseURL(p.baseURL),
		option.WithMaxRetries(0), // we retry ourselves, never after output began
		option.WithMiddleware(catchStatus),
	}
	if key != "" {
		sdkOpts = append(sdkOpts, option.WithAPIKey(key))
	}
	if o.HTTPClient != nil {
		sdkOpts = append(sdkOpts, option.WithHTTPClient(o.HTTPClient))
	}
	p.svc = sdk.NewChatCompletionService(sdkOpts...)
	return p, nil
}

// Name returns the configured provider name.
func (p *Provider) Name() string { return p.name }

// Stream sends req and streams the answer; see llm.Provider.
func (p *Provider) Stream(ctx context.Context, req *llm.Request, onEvent func(llm.Event)) (*llm.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return nil, err
	}
	emitted := false
	emit := func(e llm.Event) {
		emitted = true
		if onEvent != nil {
			onEvent(e)
		}
	}
	var resp *llm.Response
	err = llm.Retry(ctx, p.policy, func(ctx context.Context) (bool, error) {
		var err error
		resp, err = p.streamOnce(ctx, params, emit)
		return emitted, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// streamOnce makes one request and reads its stream to the end. ctx is the
// attempt's own, bounded by the request timeout.
func (p *Provider) streamOnce(ctx context.Context, params sdk.ChatCompletionNewParams, emit func(llm.Event)) (*llm.Response, error) {
	stream := p.svc.NewStreaming(ctx, params)
	defer stream.Close() //nolint:errcheck // closing a read stream; its error says nothing new
	acc := newAccumulator(p.name, emit)
	for stream.Next() {
		if err := acc.add(stream.Current()); err != nil {
			return nil, err
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	return acc.finish()
}
