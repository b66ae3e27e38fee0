package openai

import (
	"context"
	"fmt"
	"net/http"
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
)

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
	name       string
	model      string
	baseURL    string
	local      bool
	maxRetries int
	timeout    time.Duration
	svc        sdk.ChatCompletionService
	sleep      func(context.Context, time.Duration) error
	backoff    func(attempt int) time.Duration
}

var (
	_ llm.Provider     = (*Provider)(nil)
	_ llm.TokenCounter = (*Provider)(nil)
)

// Option configures a Provider.
type Option func(*options)

type options struct {
	httpClient *http.Client
	sleep      func(context.Context, time.Duration) error
}

// WithHTTPClient sets the HTTP client (default: the SDK's).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithSleep replaces the wait between retries (tests count attempts without
// waiting). sleep must return ctx's error when ctx is done first.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) { o.sleep = sleep }
}

// New builds the provider cfg.Provider names ("openai", or a compatible
// server's name). The key is read from the environment variable cfg.KeyEnv
// names, or the provider's default; local servers need none.
func New(cfg llm.Config, opts ...Option) (*Provider, error) {
	c, ok := known[cfg.Provider]
	if !ok {
		return nil, fmt.Errorf("openai: unknown provider %q (known: %s)", cfg.Provider, strings.Join(Names(), ", "))
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("%s: no model configured", cfg.Provider)
	}
	o := options{sleep: sleepCtx}
	for _, opt := range opts {
		opt(&o)
	}
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
		name:       cfg.Provider,
		model:      cfg.Model,
		baseURL:    strings.TrimRight(base, "/") + "/",
		local:      c.local,
		maxRetries: cfg.MaxRetries,
		timeout:    cfg.Timeout,
		sleep:      o.sleep,
		backoff:    backoff,
	}
	if p.maxRetries == 0 {
		p.maxRetries = defaultMaxRetries
	}
	if p.maxRetries < 0 {
		p.maxRetries = 0
	}
	if p.timeout <= 0 {
		p.timeout = defaultTimeout
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
	if o.httpClient != nil {
		sdkOpts = append(sdkOpts, option.WithHTTPClient(o.httpClient))
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
	for attempt := 0; ; attempt++ {
		resp, err := p.streamOnce(ctx, params, emit)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		le, ok := err.(*llm.Error)
		if !ok || !le.Retryable || emitted || attempt >= p.maxRetries {
			return nil, err
		}
		wait := p.backoff(attempt)
		if le.RetryAfter > 0 {
			if le.RetryAfter > maxRetryAfter {
				return nil, err // the server asks for longer than we wait
			}
			wait = le.RetryAfter
		}
		if err := p.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// streamOnce makes one request and reads its stream to the end.
func (p *Provider) streamOnce(ctx context.Context, params sdk.ChatCompletionNewParams, emit func(llm.Event)) (*llm.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
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
