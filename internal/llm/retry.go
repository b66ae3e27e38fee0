package llm

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultMaxRetryAfter is the longest retry-after a provider waits out
// itself when its RetryPolicy names no other.
const DefaultMaxRetryAfter = 2 * time.Minute

// RetryPolicy is the rule every provider retries by: only an *Error marked
// Retryable is retried, never once the attempt has shown the caller an
// event, at most MaxRetries times, waiting what the server asked for
// (RetryAfter) or else Backoff.
type RetryPolicy struct {
	// MaxRetries is how many times a failed attempt is repeated (0: never).
	MaxRetries int
	// Timeout bounds each attempt on its own (0: only the caller's ctx does).
	Timeout time.Duration
	// Backoff is the wait before a retry when the server asked for none.
	Backoff Backoff
	// MaxRetryAfter is the longest retry-after waited out; a server asking
	// for more gets its error returned (RetryAfter set) so the caller can
	// decide. 0: DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// Sleep waits between attempts (nil: Sleep). It must return ctx.Err()
	// when ctx ends first; tests record waits with it instead of taking them.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retry runs attempt until it succeeds, fails for good, or has been retried
// p.MaxRetries times. Each call of attempt gets a ctx bounded by p.Timeout,
// and reports whether it emitted an event to the caller; such an attempt is
// never retried. Retry returns ctx.Err() once the caller's ctx has ended,
// else nil or the last attempt's error as attempt returned it.
func Retry(ctx context.Context, p RetryPolicy, attempt func(ctx context.Context) (emitted bool, err error)) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	maxRetryAfter := p.MaxRetryAfter
	if maxRetryAfter <= 0 {
		maxRetryAfter = DefaultMaxRetryAfter
	}
	for n := 0; ; n++ {
		emitted, err := runAttempt(ctx, p.Timeout, attempt)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var le *Error
		if emitted || n >= p.MaxRetries || !errors.As(err, &le) || !le.Retryable {
			return err
		}
		wait := le.RetryAfter
		if wait > maxRetryAfter {
			return err // the server asks for longer than we wait
		}
		if wait <= 0 {
			wait = p.Backoff.Delay(n)
		}
		if serr := sleep(ctx, wait); serr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return serr
		}
	}
}

func runAttempt(ctx context.Context, timeout time.Duration, attempt func(ctx context.Context) (bool, error)) (bool, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return attempt(ctx)
}

// Backoff is exponential backoff with jitter: the wait before retry n+1 is
// Base<<n, capped at Max, less a random share of up to Jitter of it.
type Backoff struct {
	Base, Max time.Duration
	// Jitter is the most of the delay randomness may take off, in [0, 1]:
	// 0.25 waits between 75% and all of it, 0.5 between half and all.
	Jitter float64
	// Rand returns a number in [0, 1) (nil: math/rand/v2.Float64).
	Rand func() float64
}

// Delay is the wait before retry n+1 (n counts from 0).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Max
	// Base<<n only where it neither overflows nor passes Max.
	if b.Base > 0 && n >= 0 && n < 63 && b.Base <= b.Max>>n {
		d = b.Base << n
	}
	if b.Jitter == 0 {
		return d
	}
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	return d - time.Duration(float64(d)*b.Jitter*r())
}

// Sleep waits d, or until ctx ends, and then returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RetryAfter is how long a response's headers ask the client to wait:
// retry-after-ms, else retry-after in seconds or as an HTTP date (measured
// from now). It is 0 when neither says anything usable; any cap is the
// caller's.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("retry-after")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// IsTransient reports a connection that broke rather than one refused: a
// reset, an early EOF, a timeout on the wire. Asking again may succeed.
func IsTransient(err error) bool {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "unexpected EOF")
}

// Options are what a provider's New takes besides its Config: how it
// reaches the vendor and how it waits between retries. The defaults serve
// users; tests replace them.
type Options struct {
	// HTTPClient sends the requests (a proxy, a test transport); nil is the
	// vendor SDK's own.
	HTTPClient *http.Client
	// Sleep is the wait between retries; it must return ctx.Err() when ctx
	// ends first (default Sleep).
	Sleep func(ctx context.Context, d time.Duration) error
	// Backoff computes the delays between retries (default: the
	// provider's).
	Backoff Backoff
}

// Option changes Options.
type Option func(*Options)

// WithHTTPClient sends requests through c.
func WithHTTPClient(c *http.Client) Option { return func(o *Options) { o.HTTPClient = c } }

// WithSleep replaces the wait between retries (tests record waits instead
// of taking them).
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *Options) { o.Sleep = sleep }
}

// WithBackoff sets the first retry's delay and the cap on any computed
// delay (retry-after from the server is honoured beyond the cap, up to
// DefaultMaxRetryAfter).
func WithBackoff(base, max time.Duration) Option {
	return func(o *Options) { o.Backoff.Base, o.Backoff.Max = base, max }
}

// NewOptions returns the defaults, with backoff the provider's, and opts
// applied over them.
func NewOptions(backoff Backoff, opts ...Option) Options {
	o := Options{Sleep: Sleep, Backoff: backoff}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
