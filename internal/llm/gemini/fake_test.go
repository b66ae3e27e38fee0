package gemini

import (
	"os"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/llmtest"
)

const testKeyEnv = "CORTEX_TEST_GEMINI_KEY"

func TestMain(m *testing.M) {
	os.Setenv(testKeyEnv, "gm-test-key")
	os.Exit(m.Run())
}

// newTestProvider builds a provider against f.
func newTestProvider(t *testing.T, f *llmtest.Server, cfg llm.Config, opts ...llm.Option) (*Provider, *llmtest.Sleeps) {
	t.Helper()
	cfg.Provider = "gemini"
	if cfg.KeyEnv == "" {
		cfg.KeyEnv = testKeyEnv
	}
	if cfg.Model == "" {
		cfg.Model = "gemini-2.5-flash"
	}
	cfg.BaseURL = f.URL
	s := &llmtest.Sleeps{}
	p, err := New(cfg, append([]llm.Option{llm.WithSleep(s.Sleep), llm.WithHTTPClient(f.Client())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// testProvider is newTestProvider with the default configuration, for
// llmtest's scenarios.
func testProvider(t *testing.T) llmtest.NewProvider {
	return func(s *llmtest.Server, opts ...llm.Option) (llm.Provider, *llmtest.Sleeps) {
		return newTestProvider(t, s, llm.Config{}, opts...)
	}
}

func userRequest(text string) *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: text}}}}}
}
