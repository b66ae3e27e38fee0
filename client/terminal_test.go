package cortex_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"

	cortex "github.com/nsys-cortex/cortex/client"
)

// frame is the i-th output frame of fakeDaemon: distinct, so that a frame
// delivered out of its place shows.
func frame(i int) []byte { return fmt.Appendf(nil, "%05d|", i) }

// fakeDaemon answers a terminal as the daemon does, and sends a burst of
// output, and a gap, after the client's detach and before its answer:
// output Close must keep from Read (TestTerminalOffsetAfterClose saw
// Offset fall behind what Read had returned under CI's load).
func fakeDaemon(t *testing.T, before, after int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		text := func(m cortex.TermMessage) error {
			b, _ := json.Marshal(m)
			return ws.Write(ctx, websocket.MessageText, b)
		}
		if text(cortex.TermMessage{Type: "started", PID: 7, ID: "t7"}) != nil {
			return
		}
		for i := range before {
			if ws.Write(ctx, websocket.MessageBinary, frame(i)) != nil {
				return
			}
		}
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var m cortex.TermMessage
			if json.Unmarshal(b, &m) == nil && m.Type == "detach" {
				break
			}
		}
		for i := before; i < before+after; i++ {
			if i == before+after/2 {
				text(cortex.TermMessage{Type: "gap", Offset: 1 << 20})
			}
			if ws.Write(ctx, websocket.MessageBinary, frame(i)) != nil {
				return
			}
		}
		text(cortex.TermMessage{Type: "detached"})
		ws.Close(websocket.StatusNormalClosure, "detached")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// After Close, what Read still returns is an unbroken run of the output
// from where the attachment started, and Offset is its length: attaching
// again from Offset repeats nothing and skips nothing.
func TestTerminalCloseKeepsOutputWhole(t *testing.T) {
	const before, after = 10, 300
	srv := fakeDaemon(t, before, after)
	c, err := cortex.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := range before + after {
		want.Write(frame(i))
	}
	for range 20 {
		term, err := c.Neuron("n1").Terminal(context.Background(), cortex.TerminalOptions{Command: cortex.Command{Shell: "x"}})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, before*len(frame(0)))
		if _, err := io.ReadFull(term, got); err != nil {
			t.Fatal(err)
		}
		if err := term.Close(); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(term)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rest...)
		if !bytes.HasPrefix(want.Bytes(), got) {
			t.Fatalf("after Close, Read returned output with frames missing or out of place:\n%s", got)
		}
		if off := term.Offset(); off != int64(len(got)) {
			t.Fatalf("Offset() is %d, but Read returned %d bytes", off, len(got))
		}
	}
}
