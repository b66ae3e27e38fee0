package protocol

import (
	"encoding/json"
	"fmt"
)

// ExchangeHello sends me and reads the peer's hello, which must come from
// wantRole and speak this major version. The caller sets deadlines.
func ExchangeHello(w *FrameWriter, r *Reader, me Hello, wantRole string) (Hello, error) {
	if err := sendHello(w, me); err != nil {
		return Hello{}, err
	}
	return readHello(r, me, wantRole)
}

// AnswerHello is the other order, for the side that listens where anyone
// may connect (an agent on a TCP port): it reads the peer's hello first,
// lets check refuse it (a wrong token), and only then sends its own, so a
// stranger learns nothing.
func AnswerHello(w *FrameWriter, r *Reader, me Hello, wantRole string, check func(Hello) error) (Hello, error) {
	peer, err := readHello(r, me, wantRole)
	if err != nil {
		return peer, err
	}
	if err := check(peer); err != nil {
		return peer, err
	}
	return peer, sendHello(w, me)
}

func sendHello(w *FrameWriter, me Hello) error {
	data, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if err := w.Write(&Header{Kind: KindHello, Data: data}, nil); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	return nil
}

func readHello(r *Reader, me Hello, wantRole string) (Hello, error) {
	var peer Hello
	f, err := r.Read()
	if err != nil {
		return peer, fmt.Errorf("reading the %s's hello: %w", wantRole, err)
	}
	if f.Kind != KindHello {
		return peer, fmt.Errorf("the %s's first frame is %q, not hello", wantRole, f.Kind)
	}
	if err := json.Unmarshal(f.Data, &peer); err != nil {
		return peer, fmt.Errorf("the %s's hello does not decode: %v", wantRole, err)
	}
	major, _, err := ParseVersion(peer.Protocol)
	if err != nil {
		return peer, fmt.Errorf("the %s's hello: %w", wantRole, err)
	}
	if major != Major {
		return peer, fmt.Errorf("%s %q speaks protocol %s but this %s speaks %s: install a matching cortex-agent",
			wantRole, peer.Software, peer.Protocol, me.Role, Version())
	}
	if peer.Role != wantRole {
		return peer, fmt.Errorf("peer announced role %q, want %s", peer.Role, wantRole)
	}
	return peer, nil
}
