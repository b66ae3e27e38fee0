package link

import (
	"bytes"
	"context"
	"encoding/json"
	"io"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// maxFsEventLine bounds one event's line: its name, and room for the rest.
const maxFsEventLine = protocol.MaxFsEventName*6 + 64 // JSON may escape each byte as \u00XX

// Watch streams the changes of the directory args.Path in the neuron
// (fs_watch): ready runs once the agent watches (changes from then on are
// seen), out once per change, until ctx ends (nil), out returns an error,
// or the agent ends the watch (the directory went: nil; its error; an
// end before ready is an error: no agent ends a watch so). Every
// event is checked (protocol.CheckFsEvent): one that no agent sends ends
// the watch with an error. An agent without fs_watch answers UNSUPPORTED.
func (c *Client) Watch(ctx context.Context, args *protocol.FsWatchArgs, ready func(), out func(protocol.FsEvent) error) error {
	s, err := c.c.Stream(ctx, &Request{Cmd: protocol.CmdFsWatch, Args: args, Timeout: NoTimeout})
	if err != nil {
		return err
	}
	defer s.Close()
	var pending []byte
	readied := false
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch ev.Stream {
		case protocol.StreamReady:
			if readied {
				return protocol.Errorf(protocol.CodeInternal, "fs_watch: the agent said it was ready twice")
			}
			readied = true
			if ready != nil {
				ready()
			}
		case protocol.StreamFs:
			if !readied {
				return protocol.Errorf(protocol.CodeInternal, "fs_watch: the agent sent a change before it said it watched")
			}
			// Lines of JSON, one event each; a piece may end inside one.
			pending = append(pending, ev.Body...)
			for {
				line, rest, ok := bytes.Cut(pending, []byte("\n"))
				if !ok {
					break
				}
				var fe protocol.FsEvent
				if err := json.Unmarshal(line, &fe); err != nil {
					return protocol.Errorf(protocol.CodeInternal, "fs_watch: the agent sent an event that is not one: %v", err)
				}
				if err := protocol.CheckFsEvent(fe); err != nil {
					return err
				}
				if err := out(fe); err != nil {
					return err
				}
				pending = rest
			}
			if len(pending) > maxFsEventLine {
				return protocol.Errorf(protocol.CodeInternal, "fs_watch: the agent sent %d bytes of one event", len(pending))
			}
		default:
			return protocol.Errorf(protocol.CodeInternal, "fs_watch: the agent sent a %.40q event", ev.Stream)
		}
	}
	_, err = s.Result()
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		return err
	case !readied:
		return protocol.Errorf(protocol.CodeInternal, "fs_watch: the agent ended the watch before it said it watched")
	}
	return nil
}
