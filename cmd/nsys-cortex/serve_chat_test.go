package main_test

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cortex "github.com/nsys-cortex/cortex/client"
)

// The daemon serves chat sessions: its configuration chooses the provider
// (here the OpenAI one, against a fake speaking its wire format), the key
// comes from the daemon's environment, and a client drives a turn that
// writes a file in a real neuron, streamed as events.
func TestServeChatSession(t *testing.T) {
	c := newCLI(t, "process")
	fake := &fakeOpenAI{answers: []func(io.Writer){
		toolCall("call_1", "write", map[string]any{"path": "from-api.txt", "content": "written over the API\n"}),
		func(w io.Writer) {
			chunk(w, map[string]any{"role": "assistant", "content": "Wrote "}, "")
			chunk(w, map[string]any{"content": "it."}, "stop")
		},
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	url, _ := c.serve(t, "OPENAI_API_KEY=test-key", "NSYS_CORTEX_PROVIDER=openai", "NSYS_CORTEX_MODEL=fake",
		"NSYS_CORTEX_LLM_BASE_URL="+srv.URL+"/v1")
	t.Setenv("NSYS_CORTEX_HOME", c.home)
	token, err := cortex.LocalToken()
	if err != nil {
		t.Fatal(err)
	}
	api, err := cortex.New(url, cortex.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := api.CreateSession(ctx, &cortex.SessionCreate{Neuron: "apichat"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Provider != "openai" || s.Model != "fake" || s.Neuron != "apichat" {
		t.Fatalf("session %+v", s)
	}
	var text strings.Builder
	var types []string
	end, err := api.Send(ctx, s.ID, "write from-api.txt", func(e cortex.ChatEvent) {
		types = append(types, e.Type)
		if e.Type == "text" {
			text.WriteString(e.Text)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if end.Stop != "done" || text.String() != "Wrote it." {
		t.Fatalf("turn: %+v, text %q, events %v", end, text.String(), types)
	}
	got, err := api.Neuron("apichat").ReadFile(ctx, "from-api.txt")
	if err != nil || string(got) != "written over the API\n" {
		t.Fatalf("the file the agent wrote: %q %v", got, err)
	}
	// The session is the daemon's file, like a CLI chat's.
	files, _ := filepath.Glob(filepath.Join(c.home, "sessions", s.ID+".jsonl"))
	if len(files) != 1 {
		t.Fatalf("session file: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if strings.Contains(string(b), "test-key") {
		t.Fatal("the API key reached the session file")
	}
}
