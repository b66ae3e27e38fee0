package loop_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/anthropic"
	"github.com/nsys-cortex/cortex/internal/llm/gemini"
	"github.com/nsys-cortex/cortex/internal/llm/llmtest"
	"github.com/nsys-cortex/cortex/internal/llm/openai"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// vendor is one provider against a fake of its API: its recorded text
// stream, where a stream is cut to leave it open after its first text,
// and the roles of the turns a request's body holds.
type vendor struct {
	name    string
	stream  string // testdata of the provider's own tests
	sep     string // between two events of the stream
	text    string // in the first event that carries text
	provide func(t *testing.T, url string) llm.Provider
	roles   func(t *testing.T, body []byte) []string
}

var vendors = []vendor{
	{name: "anthropic", stream: "../llm/anthropic/testdata/text.sse", sep: "\n\n", text: `"text_delta"`,
		provide: func(t *testing.T, url string) llm.Provider {
			t.Setenv("CORTEX_TEST_ANTHROPIC_KEY", "sk-ant-test")
			return must(anthropic.New(llm.Config{Provider: "anthropic", BaseURL: url, KeyEnv: "CORTEX_TEST_ANTHROPIC_KEY", Model: "claude-sonnet-4-5"}))
		},
		roles: func(t *testing.T, body []byte) []string { return turnRoles(t, body, "messages", nil) }},
	{name: "openai", stream: "../llm/openai/testdata/text.sse", sep: "\n\n", text: `"content":"The build"`,
		provide: func(t *testing.T, url string) llm.Provider {
			t.Setenv("CORTEX_TEST_OPENAI_KEY", "sk-test")
			return must(openai.New(llm.Config{Provider: "openai", BaseURL: url + "/v1", KeyEnv: "CORTEX_TEST_OPENAI_KEY", Model: "gpt-4o"}))
		},
		roles: func(t *testing.T, body []byte) []string {
			return turnRoles(t, body, "messages", []string{"system", "developer"})
		}},
	{name: "gemini", stream: "../llm/gemini/testdata/text.sse", sep: "\r\n\r\n", text: `"text": "The build"`,
		provide: func(t *testing.T, url string) llm.Provider {
			t.Setenv("CORTEX_TEST_GEMINI_KEY", "gm-test")
			return must(gemini.New(llm.Config{Provider: "gemini", BaseURL: url, KeyEnv: "CORTEX_TEST_GEMINI_KEY", Model: "gemini-2.5-flash"}))
		},
		roles: func(t *testing.T, body []byte) []string { return turnRoles(t, body, "contents", nil) }},
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// turnRoles returns the roles of the turns under key in a request body
// (model: assistant), leaving out those in skip.
func turnRoles(t *testing.T, body []byte, key string, skip []string) []string {
	t.Helper()
	var req map[string]json.RawMessage
	var turns []struct {
		Role string `json:"role"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("request body: %v", err)
	}
	if err := json.Unmarshal(req[key], &turns); err != nil {
		t.Fatalf("request body's %s: %v", key, err)
	}
	var roles []string
	for _, m := range turns {
		switch {
		case slices.Contains(skip, m.Role):
		case m.Role == "model":
			roles = append(roles, "assistant")
		default:
			roles = append(roles, m.Role)
		}
	}
	return roles
}

// A turn cancelled while the model streams its answer leaves its request
// answered by a note, in the history and in the session, so that the next
// turn's request is well formed for every provider: user and assistant
// turns alternate (which Anthropic and Gemini want, and without which the
// first request would merge into the second and be answered after all),
// and the cancelled request is not the one the model answers next.
func TestCancelledTurnLeavesNoUnansweredRequest(t *testing.T) {
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			raw, err := os.ReadFile(v.stream)
			if err != nil {
				t.Fatal(err)
			}
			stream := string(raw)
			events := strings.SplitAfter(stream, v.sep)
			n := slices.IndexFunc(events, func(e string) bool { return strings.Contains(e, v.text) })
			if n < 0 {
				t.Fatalf("no event with %s in %s", v.text, v.stream)
			}
			srv := llmtest.Serve(t, llmtest.Reply{Body: strings.Join(events[:n+1], ""), Hold: true}, llmtest.Reply{Body: stream})
			sess, err := session.NewManager(t.TempDir()).Create(session.Header{})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			kit, err := tools.New(tools.Detached(), tools.WithPolicy(must(policy.Preset("standard"))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, err := loop.New(loop.Config{Provider: v.provide(t, srv.URL), Kit: kit, System: "Be brief.",
				OnMessage: func(m llm.Message) {
					if _, err := sess.AppendMessage(m); err != nil {
						t.Error(err)
					}
				},
				OnEvent: func(e loop.Event) {
					if e.Kind == loop.EventModel && e.Model.Kind == llm.EventText {
						cancel() // the user presses Ctrl-C as the answer starts
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if r := a.Turn(ctx, "the first request"); r.Stop != loop.StopCancelled {
				t.Fatalf("first turn: %+v", r)
			}
			if r := a.Turn(context.Background(), "the second request"); r.Stop != loop.StopDone {
				t.Fatalf("second turn: %+v", r)
			}
			body := srv.Requests()[1].Body
			if got := v.roles(t, body); !slices.Equal(got, []string{"user", "assistant", "user"}) {
				t.Errorf("turns of the request after the cancel: %q, want user, assistant, user", got)
			}
			if !strings.Contains(string(body), loop.NoAnswerCancelled) {
				t.Errorf("the request after the cancel does not say the first was cancelled")
			}
			msgs := sess.Messages()
			if len(msgs) != 4 || msgs[0].Text() != "the first request" || msgs[1].Role != llm.RoleAssistant ||
				msgs[1].Text() != loop.NoAnswerCancelled || msgs[2].Text() != "the second request" {
				t.Errorf("the session after a cancelled and a finished turn: %+v", msgs)
			}
		})
	}
}
