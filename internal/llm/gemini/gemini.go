package gemini

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/nsys-cortex/cortex/internal/llm"
)

const (
	defaultBaseURL    = "https://generativelanguage.googleapis.com/"
	apiVersion        = "v1beta"
	defaultMaxRetries = 4
	defaultTimeout    = 10 * time.Minute
	// DefaultKeyEnv is the key variable read when the config names none
	// (GOOGLE_API_KEY is the fallback).
	DefaultKeyEnv  = "GEMINI_API_KEY"
	fallbackKeyEnv = "GOOGLE_API_KEY"
)

// Provider streams from the Gemini API.
type Provider struct {
	model      string
	baseURL    string
	key        string
	maxRetries int
	timeout    time.Duration
	http       *http.Client
	client     *genai.Client
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

// WithHTTPClient sets the HTTP client (default: a new http.Client).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithSleep replaces the wait between retries (tests count attempts without
// waiting). sleep must return ctx's error when ctx is done first.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) { o.sleep = sleep }
}

// New builds a Gemini provider. The key comes from the environment variable
// cfg.KeyEnv names, else GEMINI_API_KEY, else GOOGLE_API_KEY.
func New(cfg llm.Config, opts ...Option) (*Provider, error) {
	if cfg.Provider != "" && cfg.Provider != "gemini" {
		return nil, fmt.Errorf("gemini: cannot serve provider %q", cfg.Provider)
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("gemini: no model configured")
	}
	key, err := apiKey(cfg.KeyEnv)
	if err != nil {
		return nil, err
	}
	o := options{sleep: sleepCtx}
	for _, opt := range opts {
		opt(&o)
	}
	base := cfg.BaseURL
	if base == "" {
		base = defaultBaseURL
	}
	base = strings.TrimRight(base, "/") + "/"
	hc := o.httpClient
	if hc == nil {
		hc = &http.Client{}
	}
	// The transport notes retry-after on failed responses: genai's errors
	// drop the headers.
	capturing := *hc
	capturing.Transport = &headerCapture{next: hc.Transport}

	p := &Provider{
		model:      strings.TrimPrefix(cfg.Model, "models/"),
		baseURL:    base,
		key:        key,
		maxRetries: cfg.MaxRetries,
		timeout:    cfg.Timeout,
		http:       &capturing,
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
	// Everything genai would read from the environment is set here, so it
	// reads nothing; RetryOptions stays nil: genai does not retry.
	p.client, err = genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:      key,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  p.http,
		HTTPOptions: genai.HTTPOptions{BaseURL: base, APIVersion: apiVersion},
	})
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	return p, nil
}

func apiKey(keyEnv string) (string, error) {
	if keyEnv != "" {
		if k := os.Getenv(keyEnv); k != "" {
			return k, nil
		}
		return "", fmt.Errorf("gemini: API key missing: set the environment variable %s", keyEnv)
	}
	for _, env := range []string{DefaultKeyEnv, fallbackKeyEnv} {
		if k := os.Getenv(env); k != "" {
			return k, nil
		}
	}
	return "", fmt.Errorf("gemini: API key missing: set the environment variable %s (or %s)", DefaultKeyEnv, fallbackKeyEnv)
}

// Name returns "gemini".
func (p *Provider) Name() string { return "gemini" }

// Stream sends req and streams the answer; see llm.Provider.
func (p *Provider) Stream(ctx context.Context, req *llm.Request, onEvent func(llm.Event)) (*llm.Response, error) {
	contents, config, err := p.request(req)
	if err != nil {
		return nil, err
	}
	model := p.modelFor(req)
	emitted := false
	emit := func(e llm.Event) {
		emitted = true
		if onEvent != nil {
			onEvent(e)
		}
	}
	for attempt := 0; ; attempt++ {
		resp, err := p.streamOnce(ctx, model, contents, config, emit)
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

func (p *Provider) modelFor(req *llm.Request) string {
	if req.Model != "" {
		return strings.TrimPrefix(req.Model, "models/")
	}
	return p.model
}

// streamOnce makes one request and reads its stream to the end.
func (p *Provider) streamOnce(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig, emit func(llm.Event)) (*llm.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var seen http.Header
	ctx = context.WithValue(ctx, headerKey{}, &seen)
	acc := newAccumulator(emit)
	for chunk, err := range p.client.Models.GenerateContentStream(ctx, model, contents, config) {
		if err != nil {
			return nil, p.classify(ctx, err, seen)
		}
		acc.add(chunk)
	}
	if ctx.Err() != nil {
		return nil, p.classify(ctx, ctx.Err(), seen)
	}
	return acc.finish()
}
