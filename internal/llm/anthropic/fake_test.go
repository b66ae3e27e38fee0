package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/llmtest"
)

// testKeyEnv holds the key every test provider reads; set once in TestMain
// so tests can run in parallel without t.Setenv.
const (
	testKeyEnv = "CORTEX_ANTHROPIC_TEST_KEY"
	testKey    = "sk-ant-test-0123456789abcdef"
)

func TestMain(m *testing.M) {
	os.Setenv(testKeyEnv, testKey)
	os.Exit(m.Run())
}

// fakeServer speaks Anthropic's wire format: each request is answered by
// the next answer of its script, and a request past the script fails the
// test. It fails the test, and answers 401, when a request lacks the
// headers the real API requires.
type fakeServer struct {
	*llmtest.Server
	t *testing.T
}

func newFakeServer(t *testing.T, script ...http.Handler) *fakeServer {
	t.Helper()
	return &fakeServer{t: t, Server: llmtest.NewServer(t, llmtest.Options{
		Check:     checkRequest,
		Reject:    llmtest.Reply{Status: http.StatusUnauthorized, Body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`},
		Exhausted: llmtest.Reply{Status: http.StatusInternalServerError, Body: `{"type":"error","error":{"type":"api_error","message":"fake server has no answer queued"}}`},
		Header:    map[string]string{"request-id": "req_fake"},
	}, script...)}
}

// checkRequest says what in r the real API would refuse.
func checkRequest(r *llmtest.Request) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if r.Method != http.MethodPost {
		fail("method %s, want POST", r.Method)
	}
	if r.Path != "/v1/messages" && r.Path != "/v1/messages/count_tokens" {
		fail("path %s", r.Path)
	}
	if got := r.Header.Get("x-api-key"); got != testKey {
		fail("x-api-key %q, want the test key", got)
	}
	if r.Header.Get("anthropic-version") == "" {
		fail("no anthropic-version header")
	}
	if got := r.Header.Get("authorization"); got != "" {
		fail("authorization header sent (%d bytes): the key belongs in x-api-key only", len(got))
	}
	if ct := r.Header.Get("content-type"); !strings.HasPrefix(ct, "application/json") {
		fail("content-type %q", ct)
	}
	if !json.Valid(r.Body) {
		fail("body is not JSON: %s", r.Body)
	}
	return problems
}

// provider returns a Provider pointed at the fake server, its waits
// recorded rather than slept.
func (f *fakeServer) provider(cfg llm.Config, opts ...llm.Option) (*Provider, *llmtest.Sleeps) {
	f.t.Helper()
	cfg.BaseURL = f.URL
	cfg.KeyEnv = testKeyEnv
	if cfg.Model == "" {
		cfg.Model = "claude-sonnet-4-5"
	}
	rec := &llmtest.Sleeps{}
	opts = append([]llm.Option{llm.WithSleep(rec.Sleep), func(o *llm.Options) { o.Backoff.Rand = func() float64 { return 0.5 } }}, opts...)
	p, err := New(cfg, opts...)
	if err != nil {
		f.t.Fatalf("New: %v", err)
	}
	return p, rec
}

// sse answers with a recorded event stream.
func sse(t *testing.T, name string) llmtest.Reply {
	t.Helper()
	return llmtest.Reply{Body: llmtest.Fixture(t, name)}
}

// jsonAnswer answers with a recorded JSON body (an error or count_tokens).
func jsonAnswer(t *testing.T, status int, header map[string]string, name string) llmtest.Reply {
	t.Helper()
	return llmtest.Reply{Status: status, Header: header, Body: llmtest.Fixture(t, name), JSON: true}
}

// dropConnection closes the TCP connection without answering.
func dropConnection(*testing.T) llmtest.Reply { return llmtest.Reply{Hangup: true} }
