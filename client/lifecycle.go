package cortex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"time"
)

// A neuron's life beyond create and destroy (docs/lifecycle.md): labels,
// a deadline, pause and resume, its use of the machine, and the events
// that record what happened to it.

// ListOptions narrow a List.
type ListOptions struct {
	// LabelSelector keeps the neurons whose labels match it, in kubectl's
	// syntax: "team=a,run!=42", "env in (ci,dev)", "!canary". A selector
	// that does not parse is a BadRequestError.
	LabelSelector string
}

// LabelsUpdate changes a neuron's labels (PATCH .../labels): Set adds or
// replaces keys, Remove drops them (a key not there is no error).
type LabelsUpdate struct {
	Set    map[string]string `json:"set,omitempty"`
	Remove []string          `json:"remove,omitempty"`
}

// TimeoutRequest gives a running neuron a new deadline TimeoutMs from now
// (0 clears it); OnTimeout, when given, replaces the action.
type TimeoutRequest struct {
	TimeoutMs int64  `json:"timeoutMs"`
	OnTimeout string `json:"onTimeout,omitempty"`
}

// PauseRequest shapes a pause: ToDisk saves a microVM whole to disk and
// lets its VMM exit (qemu, firecracker; other modes answer UNSUPPORTED).
type PauseRequest struct {
	ToDisk bool `json:"toDisk,omitempty"`
}

// Metrics is a neuron's use of the machine at one moment
// (GET .../metrics); units are in the names.
type Metrics struct {
	ID     string    `json:"id"`
	At     time.Time `json:"at"`
	Mode   string    `json:"mode"`
	Status string    `json:"status"` // running, paused or stopped (then only DiskBytes)
	// CPUSeconds is the CPU time used since the neuron started.
	CPUSeconds float64 `json:"cpuSeconds"`
	// MemoryBytes is resident memory now; MemoryPeakBytes the most it has
	// had, MemoryLimitBytes its ceiling (0: none known).
	MemoryBytes      int64 `json:"memoryBytes"`
	MemoryPeakBytes  int64 `json:"memoryPeakBytes,omitempty"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes,omitempty"`
	Pids             int   `json:"pids"`
	// DiskBytes is what the neuron's data takes on the host's disk.
	DiskBytes int64 `json:"diskBytes"`
	// EgressBytes and EgressConnections count what went through its egress
	// proxy; -1 when it has none.
	EgressBytes       int64   `json:"egressBytes"`
	EgressConnections int64   `json:"egressConnections"`
	UptimeSeconds     float64 `json:"uptimeSeconds"`
	OOMKills          int64   `json:"oomKills,omitempty"`
	// Source says where the figures come from ("cgroup v2", "/proc").
	Source string `json:"source,omitempty"`
}

// NeuronEvent is one thing that happened to a neuron (GET /v1/events):
// Type is created, started, paused, resumed, stopped, destroyed, wiped,
// timeout, auto-paused, agent-died, oom-killed, snapshot-created or
// snapshot-restored. Labels are the neuron's when it happened; Principal
// says who asked ("operator", "api", "keeper").
type NeuronEvent struct {
	Time      time.Time         `json:"time"`
	Type      string            `json:"type"`
	Neuron    string            `json:"neuron"`
	Mode      string            `json:"mode,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Principal string            `json:"principal,omitempty"`
}

// EventsOptions say which events Events yields.
type EventsOptions struct {
	// Since is the time of the oldest event wanted (zero: only those that
	// happen from now on).
	Since time.Time
	// Until ends the stream once events up to it are yielded (zero:
	// follow until ctx ends; a time past: only what is recorded).
	Until time.Time
	// LabelSelector keeps the events of neurons whose labels (when it
	// happened) match it.
	LabelSelector string
}

// List returns the neurons, running or stopped; with options, those
// whose labels match the selector.
func (c *Client) List(ctx context.Context, opts ...ListOptions) ([]Neuron, error) {
	q := url.Values{}
	for _, o := range opts {
		if o.LabelSelector != "" {
			q.Set("labelSelector", o.LabelSelector)
		}
	}
	var out struct {
		Neurons []Neuron `json:"neurons"`
	}
	return out.Neurons, c.call(ctx, "GET", "/v1/neurons", q, nil, &out)
}

// SetLabels changes the neuron's labels (running or stopped) and returns
// the neuron with them.
func (n *NeuronClient) SetLabels(ctx context.Context, u *LabelsUpdate) (*Neuron, error) {
	if u == nil {
		u = &LabelsUpdate{}
	}
	var out Neuron
	return &out, n.c.call(ctx, "PATCH", n.prefix+"/labels", nil, u, &out)
}

// SetTimeout gives the running neuron a new deadline d from now (0 clears
// it); onTimeout ("" keeps the one it has) is stop, pause, destroy or wipe.
// The wire carries milliseconds: d is rounded up to a whole one.
func (n *NeuronClient) SetTimeout(ctx context.Context, d time.Duration, onTimeout string) (*Neuron, error) {
	if d < 0 {
		return nil, fmt.Errorf("timeout %s is negative", d)
	}
	ms := d.Milliseconds()
	if d%time.Millisecond != 0 {
		ms++
	}
	var out Neuron
	return &out, n.c.call(ctx, "POST", n.prefix+"/timeout", nil, &TimeoutRequest{TimeoutMs: ms, OnTimeout: onTimeout}, &out)
}

// Pause freezes every process of the running neuron with its memory kept
// (nil: the defaults). A paused neuron answers ExistsError (it stays
// paused); a stopped one NotRunningError. Any request to a paused neuron
// resumes it first.
func (n *NeuronClient) Pause(ctx context.Context, r *PauseRequest) (*Neuron, error) {
	if r == nil {
		r = &PauseRequest{}
	}
	var out Neuron
	return &out, n.c.call(ctx, "POST", n.prefix+"/pause", nil, r, &out)
}

// Fork makes new neurons with this one's files as they are now (and, in
// qemu mode, its memory and processes): r.ID, or r.Count of them named
// r.ID-1 ... A running source is paused for the copy and resumed.
func (n *NeuronClient) Fork(ctx context.Context, r *NeuronForkRequest) ([]Neuron, error) {
	var out NeuronForks
	if err := n.c.call(ctx, "POST", n.prefix+"/fork", nil, r, &out); err != nil {
		return nil, err
	}
	return out.Neurons, nil
}

// Resume continues the paused neuron. A running one answers ExistsError
// (it runs on).
func (n *NeuronClient) Resume(ctx context.Context) (*Neuron, error) {
	var out Neuron
	return &out, n.c.call(ctx, "POST", n.prefix+"/resume", nil, struct{}{}, &out)
}

// Metrics measures the neuron now. It never resumes a paused neuron and
// never counts as use of it.
func (n *NeuronClient) Metrics(ctx context.Context) (*Metrics, error) {
	var m Metrics
	return &m, n.c.call(ctx, "GET", n.prefix+"/metrics", nil, nil, &m)
}

// Events yields the lifecycle events that pass o, oldest first: those
// recorded since o.Since, then each new one as it happens, until ctx ends
// (the iteration then just stops) or o.Until is reached. A failure, such
// as the daemon shutting down (UNAVAILABLE), is yielded as the last
// error.
//
//	for ev, err := range c.Events(ctx, cortex.EventsOptions{Since: time.Now().Add(-time.Hour)}) {
//		if err != nil { ... }
//		fmt.Println(ev.Time, ev.Type, ev.Neuron)
//	}
func (c *Client) Events(ctx context.Context, o EventsOptions) iter.Seq2[NeuronEvent, error] {
	return func(yield func(NeuronEvent, error) bool) {
		q := url.Values{}
		if !o.Since.IsZero() {
			q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
		}
		if !o.Until.IsZero() {
			q.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
		}
		if o.LabelSelector != "" {
			q.Set("labelSelector", o.LabelSelector)
		}
		req, err := c.request(ctx, "GET", "/v1/events", q, nil)
		if err != nil {
			yield(NeuronEvent{}, err)
			return
		}
		s, err := c.stream(req)
		if err != nil {
			if ctx.Err() == nil {
				yield(NeuronEvent{}, err)
			}
			return
		}
		defer s.Close()
		for {
			name, data, err := s.read()
			switch {
			case err != nil && ctx.Err() != nil:
				return // the caller ended it
			case errors.Is(err, io.EOF):
				yield(NeuronEvent{}, fmt.Errorf("reading the event stream: %w", io.ErrUnexpectedEOF))
				return
			case err != nil:
				yield(NeuronEvent{}, fmt.Errorf("reading the event stream: %w", err))
				return
			}
			switch name {
			case "event":
				var ev NeuronEvent
				if err := json.Unmarshal(data, &ev); err != nil {
					yield(NeuronEvent{}, fmt.Errorf("a malformed event: %w", err))
					return
				}
				if !yield(ev, nil) {
					return
				}
			case "end":
				return
			case "error":
				var ae APIError
				if err := json.Unmarshal(data, &ae); err != nil {
					yield(NeuronEvent{}, fmt.Errorf("a malformed error event: %w", err))
					return
				}
				ae.Status = ae.Code.HTTPStatus()
				yield(NeuronEvent{}, ae.Typed())
				return
			}
		}
	}
}

// URL returns a signed URL of port in the neuron, working for expires
// (0: an hour): it reaches the port through the daemon's proxy without
// the API's token (docs/ports.md).
func (n *NeuronClient) URL(ctx context.Context, port int, expires time.Duration) (*PortURL, error) {
	var out PortURL
	return &out, n.c.call(ctx, "POST", n.prefix+"/urls", nil, &PortURLRequest{Port: port, ExpiresInMs: expires.Milliseconds()}, &out)
}

// DialPort connects to port on the neuron's own loopback through the
// daemon (GET .../tunnel/{port}, upgraded to a raw connection): what is
// written reaches the neuron's server, what it sends is read. Nothing
// listening is a NotFoundError (status 502); a stopped neuron a
// NotRunningError. The connection outlives ctx, which bounds the connect.
func (n *NeuronClient) DialPort(ctx context.Context, port int) (net.Conn, error) {
	req, err := n.c.request(ctx, "GET", fmt.Sprintf("%s/tunnel/%d", n.prefix, port), nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "cortex-tcp")
	resp, err := n.c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("the daemon's 101 answer is no connection")
	}
	return &tunnelConn{ReadWriteCloser: rwc, port: port}, nil
}

// tunnelConn is a tunnel to a port as a net.Conn.
type tunnelConn struct {
	io.ReadWriteCloser
	port int
}

func (t *tunnelConn) LocalAddr() net.Addr              { return tunnelAddr("client") }
func (t *tunnelConn) RemoteAddr() net.Addr             { return tunnelAddr(fmt.Sprintf("neuron:%d", t.port)) }
func (t *tunnelConn) SetDeadline(time.Time) error      { return nil }
func (t *tunnelConn) SetReadDeadline(time.Time) error  { return nil }
func (t *tunnelConn) SetWriteDeadline(time.Time) error { return nil }

type tunnelAddr string

func (a tunnelAddr) Network() string { return "cortex" }
func (a tunnelAddr) String() string  { return string(a) }

// Export streams the neuron as one archive to w (tar + zstd; with
// snapshots, its snapshots too): import reads it back.
func (n *NeuronClient) Export(ctx context.Context, w io.Writer, snapshots bool) error {
	q := url.Values{}
	if snapshots {
		q.Set("snapshots", "true")
	}
	req, err := n.c.request(ctx, "GET", n.prefix+"/export", q, nil)
	if err != nil {
		return err
	}
	resp, err := n.c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// Import makes a neuron, stopped, from an archive export wrote, read
// from r, under id ("": the archive's own).
func (c *Client) Import(ctx context.Context, r io.Reader, id string) (*Neuron, error) {
	q := url.Values{}
	if id != "" {
		q.Set("id", id)
	}
	req, err := c.request(ctx, "POST", "/v1/neurons/import", q, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/zstd")
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out Neuron
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("import: decoding the answer: %w", err)
	}
	return &out, nil
}

// Diff lists what changed from against to the neuron: another neuron's
// id, "ID@SNAPSHOT" (or "@SNAPSHOT", one of its own), or "" for the
// neuron it was forked from; patch adds unified diffs of text files.
func (n *NeuronClient) Diff(ctx context.Context, against string, patch bool) (*Diff, error) {
	q := url.Values{}
	if against != "" {
		q.Set("against", against)
	}
	if patch {
		q.Set("patch", "true")
	}
	var out Diff
	return &out, n.c.call(ctx, "GET", n.prefix+"/diff", q, nil, &out)
}
