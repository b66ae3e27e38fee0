package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// sleeps records the waits Retry asks for instead of taking them.
type sleeps []time.Duration

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	*s = append(*s, d)
	return ctx.Err()
}

// script is an attempt that fails with errs in turn, then succeeds.
type script struct {
	errs    []error
	emitted bool
	calls   int
}

func (s *script) attempt(context.Context) (bool, error) {
	s.calls++
	if s.calls <= len(s.errs) {
		return s.emitted, s.errs[s.calls-1]
	}
	return s.emitted, nil
}

func retryable(retryAfter time.Duration) *Error {
	return &Error{Provider: "test", Status: 503, Message: "busy", Retryable: true, RetryAfter: retryAfter}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	permanent := &Error{Provider: "test", Status: 400, Message: "bad"}
	plain := errors.New("not an llm.Error")
	backoff := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for _, tc := range []struct {
		name      string
		errs      []error
		emitted   bool
		max       int
		maxAfter  time.Duration
		wantErr   error
		wantCalls int
		wantWaits []time.Duration
	}{
		{"success", nil, false, 4, 0, nil, 1, nil},
		{"backoff then success", []error{retryable(0), retryable(0)}, false, 4, 0, nil, 3,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"retry-after honoured", []error{retryable(7 * time.Second)}, false, 4, 0, nil, 2,
			[]time.Duration{7 * time.Second}},
		{"wrapped llm.Error retried", []error{fmt.Errorf("x: %w", retryable(0))}, false, 4, 0, nil, 2,
			[]time.Duration{100 * time.Millisecond}},
		{"exhausted", []error{retryable(0), retryable(0), retryable(time.Second)}, false, 2, 0, retryable(time.Second), 3,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"no retries", []error{retryable(0)}, false, 0, 0, retryable(0), 1, nil},
		{"not retryable", []error{permanent}, false, 4, 0, permanent, 1, nil},
		{"not an llm.Error", []error{plain}, false, 4, 0, plain, 1, nil},
		{"emitted", []error{retryable(0)}, true, 4, 0, retryable(0), 1, nil},
		{"retry-after past default cap", []error{retryable(time.Hour)}, false, 4, 0, retryable(time.Hour), 1, nil},
		{"retry-after at default cap", []error{retryable(DefaultMaxRetryAfter)}, false, 4, 0, nil, 2,
			[]time.Duration{DefaultMaxRetryAfter}},
		{"retry-after past own cap", []error{retryable(2 * time.Second)}, false, 4, time.Second, retryable(2 * time.Second), 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &script{errs: tc.errs, emitted: tc.emitted}
			var waits sleeps
			p := RetryPolicy{MaxRetries: tc.max, Backoff: backoff, MaxRetryAfter: tc.maxAfter, Sleep: waits.sleep}
			err := Retry(context.Background(), p, s.attempt)
			if !reflect.DeepEqual(err, tc.wantErr) {
				t.Errorf("err = %#v, want %#v", err, tc.wantErr)
			}
			if s.calls != tc.wantCalls || !reflect.DeepEqual([]time.Duration(waits), tc.wantWaits) {
				t.Errorf("calls = %d, waits = %v; want %d, %v", s.calls, waits, tc.wantCalls, tc.wantWaits)
			}
		})
	}
}

func TestRetryReturnsTheAttemptsError(t *testing.T) {
	t.Parallel()
	last := retryable(0)
	s := &script{errs: []error{retryable(0), last}}
	var waits sleeps
	err := Retry(context.Background(), RetryPolicy{MaxRetries: 1, Sleep: waits.sleep}, s.attempt)
	if err != last {
		t.Errorf("err = %p, want the last attempt's %p", err, last)
	}
}

func TestRetryCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s := &script{errs: []error{retryable(30 * time.Second)}}
	p := RetryPolicy{MaxRetries: 4, Sleep: func(ctx context.Context, d time.Duration) error {
		cancel()
		return Sleep(ctx, d)
	}}
	if err := Retry(ctx, p, s.attempt); !errors.Is(err, context.Canceled) || s.calls != 1 {
		t.Fatalf("err = %v after %d attempts", err, s.calls)
	}
}

func TestRetryCancelledDuringAttempt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Retry(ctx, RetryPolicy{MaxRetries: 4}, func(context.Context) (bool, error) {
		calls++
		cancel()
		return false, retryable(0)
	})
	if err != context.Canceled || calls != 1 {
		t.Fatalf("err = %v after %d attempts, want the caller's ctx error", err, calls)
	}
}

func TestRetryAttemptTimeout(t *testing.T) {
	t.Parallel()
	var waits sleeps
	var deadlines []bool
	p := RetryPolicy{MaxRetries: 1, Timeout: time.Millisecond, Sleep: waits.sleep}
	err := Retry(context.Background(), p, func(ctx context.Context) (bool, error) {
		_, ok := ctx.Deadline()
		deadlines = append(deadlines, ok)
		<-ctx.Done() // each attempt gets its own timeout, and the caller's ctx lives on
		return false, &Error{Provider: "test", Code: "timeout", Retryable: true}
	})
	var le *Error
	if !errors.As(err, &le) || le.Code != "timeout" {
		t.Fatalf("err = %v", err)
	}
	if !reflect.DeepEqual(deadlines, []bool{true, true}) || len(waits) != 1 {
		t.Errorf("deadlines = %v, waits = %v", deadlines, waits)
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	half := func() float64 { return 0.5 }
	for _, tc := range []struct {
		name string
		b    Backoff
		n    int
		want time.Duration
	}{
		{"first", Backoff{Base: 100 * time.Millisecond, Max: time.Second}, 0, 100 * time.Millisecond},
		{"doubles", Backoff{Base: 100 * time.Millisecond, Max: time.Second}, 3, 800 * time.Millisecond},
		{"capped", Backoff{Base: 100 * time.Millisecond, Max: time.Second}, 4, time.Second},
		{"no overflow", Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second}, 100, 30 * time.Second},
		{"shift past int64", Backoff{Base: 3, Max: time.Duration(1<<63 - 1)}, 62, time.Duration(1<<63 - 1)},
		{"large under cap", Backoff{Base: time.Nanosecond, Max: time.Hour}, 40, 1 << 40},
		{"zero base waits max", Backoff{Max: time.Second}, 0, time.Second},
		{"quarter jitter", Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.25, Rand: half}, 0, 87500 * time.Microsecond},
		{"quarter jitter, second", Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.25, Rand: half}, 1, 175 * time.Millisecond},
		{"half jitter", Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5, Rand: half}, 0, 75 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.n); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}

func TestBackoffJitterRange(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.5}
	for n := range 8 {
		hi := min(b.Base<<n, b.Max)
		for range 100 {
			if d := b.Delay(n); d < hi/2 || d > hi {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", n, d, hi/2, hi)
			}
		}
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep after cancel = %v, want context.Canceled", err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"nil", nil, 0},
		{"none", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"fractional", http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{"zero", http.Header{"Retry-After": {"0"}}, 0},
		{"negative", http.Header{"Retry-After": {"-2"}}, 0},
		{"ms", http.Header{"Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"ms wins", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
		{"bad ms falls back", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"9"}}, 9 * time.Second},
		{"date", http.Header{"Retry-After": {now.Add(4 * time.Second).Format(http.TimeFormat)}}, 4 * time.Second},
		{"past date", http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryAfter(tc.h, now); got != tc.want {
				t.Errorf("RetryAfter = %v, want %v", got, tc.want)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestIsTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("reading body: %w", io.EOF), true},
		{timeoutErr{}, true},
		{errors.New("read tcp: connection reset by peer"), true},
		{errors.New("stream: unexpected EOF"), true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{errors.New("no such host"), false},
	} {
		if got := IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
