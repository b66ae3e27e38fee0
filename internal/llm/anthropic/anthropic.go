package anthropic

import (
	"context"
	"errors"
	"fmt"
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

// New builds a Provider from cfg. The key is read from the environment
// variable cfg.KeyEnv names (ANTHROPIC_API_KEY by default); nothing else is
// read from the environment.
func New(cfg llm.Config, opts ...llm.Option) (*Provider, error) {
	keyEnv := cfg.KeyEnv
	if keyEnv == "" {
		keyEnv = DefaultKeyEnv
	}
	key := os.Getenv(keyEnv)
	if key == "" {
		return nil, fmt.Errorf("anthropic: no API key: environment variable %s is not set", keyEnv)
	}
	o := llm.NewOptions(llm.Backoff{Base: defaultBaseDelay, Max: defaultMaxDelay, Jitter: backoffJitter}, opts...)
	p := &Provider{key: key, model: cfg.Model, timeout: cfg.Timeout}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	p.policy = llm.RetryPolicy{MaxRetries: cfg.MaxRetries, Timeout: p.timeout, Backoff: o.Backoff, Sleep: o.Sleep}
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
	if o.HTTPClient != nil {
		sdkOpts = append(sdkOpts, option.WithHTTPClient(o.HTTPClient))
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
