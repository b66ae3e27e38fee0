package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrIncompatible: the peer's hello was read, and it speaks another major
// version or plays the wrong role (not a connection that broke).
var ErrIncompatible = errors.New("incompatible peer")

// ExchangeHello sends me and reads the peer's hello, which must come from
// wantRole and speak this major version. The caller sets deadlines.
func ExchangeHello(w *FrameWriter, r *Reader, me Hello, wantRole string) (Hello, error) {
	if err := sendHello(w, me); err != nil {
		return Hello{}, err
	}
	return readHello(r, me, wantRole)
}

// AnswerHello is the other order, for the agent: it reads the peer's hello
// first, lets check refuse it (a wrong token) or complete its own (a proof
// of the peer's nonce), and only then sends its own, so a stranger who is
// refused learns nothing.
func AnswerHello(w *FrameWriter, r *Reader, me Hello, wantRole string, check func(peer Hello, me *Hello) error) (Hello, error) {
	peer, err := readHello(r, me, wantRole)
	if err != nil {
		return peer, err
	}
	if err := check(peer, &me); err != nil {
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
		return peer, fmt.Errorf("%w: %s %q speaks protocol %s but this %s speaks %s: install a matching cortex-agent",
			ErrIncompatible, wantRole, peer.Software, peer.Protocol, me.Role, Version())
	}
	if peer.Role != wantRole {
		return peer, fmt.Errorf("%w: peer announced role %q, want %s", ErrIncompatible, peer.Role, wantRole)
	}
	return peer, nil
}
