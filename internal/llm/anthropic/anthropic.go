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
	// maxRetryAfter is the longest retry-after the provider waits out
	// itself; a server asking for more gets its error returned (with
	// RetryAfter set) so the caller can decide.
	maxRetryAfter = 2 * time.Minute
)

const providerName = "anthropic"

// Provider talks to Anthropic's Messages API.
type Provider struct {
	client     sdk.Client
	key        string // only to scrub it from error text
	model      string
	maxRetries int
	timeout    time.Duration
	baseDelay  time.Duration
	maxDelay   time.Duration
	sleep      func(ctx context.Context, d time.Duration) error
	jitter     func() float64 // in [0, 1)
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
// delay (retry-after from the server is honoured beyond the cap, up to two
// minutes).
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
		sleep:     sleepCtx,
		jitter:    rand.Float64,
		baseDelay: defaultBaseDelay,
		maxDelay:  defaultMaxDelay,
	}
	for _, opt := range opts {
		opt(&o)
	}
	p := &Provider{
		key:        key,
		model:      cfg.Model,
		maxRetries: cfg.MaxRetries,
		timeout:    cfg.Timeout,
		baseDelay:  o.baseDelay,
		maxDelay:   o.maxDelay,
		sleep:      o.sleep,
		jitter:     o.jitter,
	}
	if p.maxRetries <= 0 {
		p.maxRetries = DefaultMaxRetries
	}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
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

// retry runs attempt until it succeeds, fails for good, or has been retried
// maxRetries times. Each attempt gets its own timeout. An attempt that has
// shown an event to the caller is never retried. The error returned is
// ctx.Err() when ctx ended, else an *llm.Error.
func (p *Provider) retry(ctx context.Context, attempt func(ctx context.Context) (emitted bool, err error)) error {
	for n := 0; ; n++ {
		actx, cancel := context.WithTimeout(ctx, p.timeout)
		emitted, err := attempt(actx)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lerr := p.classify(err, timedOut)
		if emitted || !lerr.Retryable || n >= p.maxRetries {
			return lerr
		}
		wait, ok := p.delay(n, lerr.RetryAfter)
		if !ok {
			return lerr
		}
		if err := p.sleep(ctx, wait); err != nil {
			return ctx.Err()
		}
	}
}

// delay is the wait before retry n+1: what the server asked for, when it
// asked for no more than maxRetryAfter (ok is false beyond that), else
// exponential backoff with up to 25% jitter taken off, capped at maxDelay.
func (p *Provider) delay(n int, retryAfter time.Duration) (time.Duration, bool) {
	if retryAfter > 0 {
		return retryAfter, retryAfter <= maxRetryAfter
	}
	d := p.baseDelay << n
	if d > p.maxDelay || d <= 0 {
		d = p.maxDelay
	}
	return d - time.Duration(float64(d)*0.25*p.jitter()), true
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
