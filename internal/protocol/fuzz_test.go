package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the decoder: it must never panic,
// never return a frame over the caps, and every frame it accepts must
// re-encode to a frame that decodes to the same thing.
func FuzzReader(f *testing.F) {
	seed := func(h *Header, body []byte) {
		var buf bytes.Buffer
		WriteFrame(&buf, h, body)
		f.Add(buf.Bytes())
	}
	seed(&Header{Kind: KindHello, Data: json.RawMessage(`{"protocol":"1.0","role":"agent","caps":["exec"]}`)}, nil)
	seed(&Header{Kind: KindRequest, ID: 1, Cmd: CmdExec, Data: json.RawMessage(`{"argv":["ls"]}`)}, []byte("stdin"))
	seed(&Header{Kind: KindResponse, ID: 1, Err: &Error{Code: CodeNotFound, Message: "x"}}, nil)
	seed(&Header{Kind: KindEvent, ID: 1, Stream: "stdout", Offset: 5}, []byte("out"))
	f.Add(prefix(0xffffffff, 0xffffffff))
	f.Add([]byte{})
	for _, r := range releases {
		for _, rec := range recordedFrames(r.dir) {
			f.Add(rec)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 1<<16)
		for {
			fr, err := r.Read()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			if len(fr.Body) > 1<<16 {
				t.Fatalf("body of %d bytes passed a 64 KiB cap", len(fr.Body))
			}
			var buf bytes.Buffer
			if err := WriteFrame(&buf, &fr.Header, fr.Body); err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			again, err := NewReader(&buf, 1<<16).Read()
			if err != nil {
				t.Fatalf("decode of re-encoded frame: %v", err)
			}
			a, _ := json.Marshal(fr.Header)
			b, _ := json.Marshal(again.Header)
			if !bytes.Equal(a, b) || !bytes.Equal(fr.Body, again.Body) {
				t.Fatalf("round trip changed the frame:\n%s\n%s", a, b)
			}
		}
	})
}
