package cortex

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Event is one event of a stream. Which field is set follows Type:
// "stdout" and "stderr" set Chunk, "gap" sets Gap, "exit" sets Result,
// "end" sets Process.
type Event struct {
	Type    string
	Chunk   *Chunk
	Gap     *Gap
	Result  *ExecResult
	Process *ProcInfo
	// Chat is set for the events of a chat turn (ChatEvent's types).
	Chat *ChatEvent
}

// Stream reads Server-Sent Events from the daemon. Close it when done
// (reading it to the end closes it too).
type Stream struct {
	resp  *http.Response
	r     *bufio.Reader
	done  atomic.Bool
	close sync.Once
}

func (c *Client) stream(req *http.Request) (*Stream, error) {
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: expected an event stream, got %s", req.Method, req.URL.Path, ct)
	}
	return &Stream{resp: resp, r: bufio.NewReaderSize(resp.Body, 64<<10)}, nil
}

// Next returns the next event; io.EOF after the last ("exit" or "end").
// An "error" event is returned as the typed error of its code.
func (s *Stream) Next() (*Event, error) {
	if s.done.Load() {
		return nil, io.EOF
	}
	name, data, err := s.read()
	if err != nil {
		s.Close()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the stream ended without its last event
		}
		return nil, fmt.Errorf("reading the event stream: %w", err)
	}
	ev := &Event{Type: name}
	var target any
	switch name {
	case "stdout", "stderr":
		ev.Chunk = &Chunk{}
		target = ev.Chunk
	case "gap":
		ev.Gap = &Gap{}
		target = ev.Gap
	case "exit":
		ev.Result = &ExecResult{}
		target = ev.Result
	case "end":
		ev.Process = &ProcInfo{}
		target = ev.Process
	case "text", "tool_start", "tool_result", "loop", "compaction", "checkpoint", "turn_end":
		ev.Chat = &ChatEvent{}
		target = ev.Chat
	case "error":
		var ae APIError
		if err := json.Unmarshal(data, &ae); err != nil {
			return nil, fmt.Errorf("a malformed error event: %w", err)
		}
		ae.Status = ae.Code.HTTPStatus()
		s.Close()
		return nil, ae.Typed()
	default:
		return ev, nil // an event this SDK does not know: skip it
	}
	if err := json.Unmarshal(data, target); err != nil {
		return nil, fmt.Errorf("a malformed %s event: %w", name, err)
	}
	if name == "exit" || name == "end" || name == "turn_end" {
		s.Close()
	}
	return ev, nil
}

// read reads one event's name and data.
func (s *Stream) read() (string, []byte, error) {
	var name string
	var data []byte
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data != nil || name != "" {
				return name, data, nil
			}
		case strings.HasPrefix(line, ":"): // a comment (keep-alive)
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
}

// Close ends the stream (and, for an exec stream, kills the command). It
// may be called from another goroutine to end a Next that waits.
func (s *Stream) Close() error {
	var err error
	s.close.Do(func() {
		s.done.Store(true)
		err = s.resp.Body.Close()
	})
	return err
}

// Copy writes a stream's stdout and stderr chunks to the writers (either
// may be nil) and returns its last event.
func (s *Stream) Copy(stdout, stderr io.Writer) (*Event, error) {
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case "stdout", "stderr":
			w := stdout
			if ev.Type == "stderr" {
				w = stderr
			}
			if w != nil {
				if _, err := w.Write(ev.Chunk.Bytes()); err != nil {
					return nil, err
				}
			}
		case "exit", "end":
			return ev, nil
		}
	}
}
