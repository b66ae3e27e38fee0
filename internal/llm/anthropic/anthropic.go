package anthropic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// Defaults for a Config that leaves them out.
const (
	DefaultKeyEnv     = "ANTHROPIC_API_KEY"
	DefaultMaxRetries = 4
	DefaultTimeout    = 10 * time.Minute
	// DefaultMaxTokens is the output limit sent when a Request leaves
	// MaxTokens at 0 (the Messages API requires one).
	DefaultMaxTokens = 8192

	defaultBaseDelay = 500 * time.Millisecond
	defaultMaxDelay  = 30 * time.Second
	// backoffJitter is the most of a computed delay jitter takes off.
	backoffJitter = 0.25
)

const providerName = "anthropic"

// Provider talks to Anthropic's Messages API.
type Provider struct {
	client  sdk.Client
	key     string // only to scrub it from error text
	model   string
	timeout time.Duration
	policy  llm.RetryPolicy
}

var (
	_ llm.Provider     = (*Provider)(nil)
	_ llm.TokenCounter = (*Provider)(nil)
)

// Option configures a Provider.
type Option func(*options)

type options struct {
	httpClient *http.Client
	sleep      func(ctx context.Context, d time.Duration) error
	jitter     func() float64
	baseDelay  time.Duration
	maxDelay   time.Duration
}

// WithHTTPClient sends requests through c (a proxy, a test transport).
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.httpClient = c }
}

// WithSleep replaces the wait between retries; sleep must return ctx.Err()
// when ctx ends first. Tests use it to record waits instead of taking them.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) { o.sleep = sleep }
}

// WithBackoff sets the first retry's delay and the cap on any computed
// delay (retry-after from the server is honoured beyond the cap, up to
// llm.DefaultMaxRetryAfter).
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) { o.baseDelay, o.maxDelay = base, max }
}

// withJitter fixes the jitter source (tests).
func withJitter(f func() float64) Option {
	return func(o *options) { o.jitter = f }
}

// New builds a Provider from cfg. The key is read from the environment
// variable cfg.KeyEnv names (ANTHROPIC_API_KEY by default); nothing else is
// read from the environment.
func New(cfg llm.Config, opts ...Option) (*Provider, error) {
	keyEnv := cfg.KeyEnv
	if keyEnv == "" {
		keyEnv = DefaultKeyEnv
	}
	key := os.Getenv(keyEnv)
	if key == "" {
		return nil, fmt.Errorf("anthropic: no API key: environment variable %s is not set", keyEnv)
	}
	o := options{
		sleep:     llm.Sleep,
		jitter:    rand.Float64,
		baseDelay: defaultBaseDelay,
		maxDelay:  defaultMaxDelay,
	}
	for _, opt := range opts {
		opt(&o)
	}
	p := &Provider{key: key, model: cfg.Model, timeout: cfg.Timeout}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	p.policy = llm.RetryPolicy{
		MaxRetries: cfg.MaxRetries,
		Timeout:    p.timeout,
		Backoff:    llm.Backoff{Base: o.baseDelay, Max: o.maxDelay, Jitter: backoffJitter, Rand: o.jitter},
		Sleep:      o.sleep,
	}
	if p.policy.MaxRetries <= 0 {
		p.policy.MaxRetries = DefaultMaxRetries
	}
	sdkOpts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		// The documented header, set by hand: it is the one credential the
		// client carries, and no credential option of the SDK is involved.
		option.WithHeader("x-api-key", key),
		option.WithMaxRetries(0), // one retry policy: ours
	}
	if cfg.BaseURL != "" {
		sdkOpts = append(sdkOpts, option.WithBaseURL(cfg.BaseURL))
	}
	if o.httpClient != nil {
		sdkOpts = append(sdkOpts, option.WithHTTPClient(o.httpClient))
	}
	p.client = sdk.NewClient(sdkOpts...)
	return p, nil
}

// Name returns "anthropic".
func (p *Provider) Name() string { return providerName }

// Stream sends req as a streaming Messages request; see llm.Provider.
func (p *Provider) Stream(ctx context.Context, req *llm.Request, onEvent func(llm.Event)) (*llm.Response, error) {
	params, err := p.newParams(req)
	if err != nil {
		return nil, err
	}
	if onEvent == nil {
		onEvent = func(llm.Event) {}
	}
	var resp *llm.Response
	err = p.retry(ctx, func(ctx context.Context) (emitted bool, err error) {
		s := newAssembler(onEvent)
		resp, err = s.run(p.client.Messages.NewStreaming(ctx, params))
		return s.emitted, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// CountTokens counts req's input tokens with the count_tokens endpoint.
func (p *Provider) CountTokens(ctx context.Context, req *llm.Request) (int, error) {
	params, err := p.newCountParams(req)
	if err != nil {
		return 0, err
	}
	var n int
	err = p.retry(ctx, func(ctx context.Context) (bool, error) {
		res, err := p.client.Messages.CountTokens(ctx, params)
		if err != nil {
			return false, err
		}
		n = int(res.InputTokens)
		return false, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// retry runs attempt under the provider's retry policy (see llm.Retry),
// classifying each failure so that the policy can judge it. The error
// returned is ctx.Err() when ctx ended, else an *llm.Error.
func (p *Provider) retry(ctx context.Context, attempt func(ctx context.Context) (emitted bool, err error)) error {
	return llm.Retry(ctx, p.policy, func(ctx context.Context) (bool, error) {
		emitted, err := attempt(ctx)
		if err != nil {
			// ctx is the attempt's own: past its deadline, our timeout
			// ended it (llm.Retry reports the caller's ending itself).
			return emitted, p.classify(err, errors.Is(ctx.Err(), context.DeadlineExceeded))
		}
		return emitted, nil
	})
}
