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

	baseBackoff = 500 * time.Millisecond
	maxBackoff  = 30 * time.Second
)

// retryBackoff is the wait before a retry the server named no delay for:
// exponential, with jitter over its upper half.
var retryBackoff = llm.Backoff{Base: baseBackoff, Max: maxBackoff, Jitter: 0.5}

// Provider streams from the Gemini API.
type Provider struct {
	model   string
	baseURL string
	key     string
	timeout time.Duration
	http    *http.Client
	client  *genai.Client
	policy  llm.RetryPolicy
}

var (
	_ llm.Provider     = (*Provider)(nil)
	_ llm.TokenCounter = (*Provider)(nil)
)

// New builds a Gemini provider. The key comes from the environment variable
// cfg.KeyEnv names, else GEMINI_API_KEY, else GOOGLE_API_KEY.
func New(cfg llm.Config, opts ...llm.Option) (*Provider, error) {
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
	o := llm.NewOptions(retryBackoff, opts...)
	base := cfg.BaseURL
	if base == "" {
		base = defaultBaseURL
	}
	base = strings.TrimRight(base, "/") + "/"
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	// The transport notes retry-after on failed responses: genai's errors
	// drop the headers.
	capturing := *hc
	capturing.Transport = &headerCapture{next: hc.Transport}

	p := &Provider{
		model:   strings.TrimPrefix(cfg.Model, "models/"),
		baseURL: base,
		key:     key,
		timeout: cfg.Timeout,
		http:    &capturing,
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
	var resp *llm.Response
	err = llm.Retry(ctx, p.policy, func(ctx context.Context) (bool, error) {
		var err error
		resp, err = p.streamOnce(ctx, model, contents, config, emit)
		return emitted, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (p *Provider) modelFor(req *llm.Request) string {
	if req.Model != "" {
		return strings.TrimPrefix(req.Model, "models/")
	}
	return p.model
}

// streamOnce makes one request and reads its stream to the end. ctx is the
// attempt's own, bounded by the request timeout.
func (p *Provider) streamOnce(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig, emit func(llm.Event)) (*llm.Response, error) {
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
