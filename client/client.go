// Package cortex is the Go SDK of the nsys-cortex HTTP API (nsys-cortex
// serve): neurons, commands, background processes, files and terminals,
// labels, deadlines, pause and resume, metrics and lifecycle events, with
// the daemon's errors as typed Go errors:
//
//	token, _ := cortex.LocalToken() // NSYS_CORTEX_API_TOKEN, or the one serve made
//	c, _ := cortex.New("http://127.0.0.1:3100", cortex.WithToken(token))
//	n, err := c.Create(ctx, &cortex.CreateRequest{ID: "demo"})
//	res, err := c.Neuron("demo").Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: "uname -a"}})
//	if errors.As(err, &cortex.NotRunningError{}) { ... }
//
// A non-zero exit status is a result (ExecResult.ExitCode), not an error.
package cortex

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends the bearer token the daemon requires.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// LocalToken returns the token of a daemon on this machine: the
// environment's NSYS_CORTEX_API_TOKEN, else the one `nsys-cortex serve`
// made and keeps in its home ($NSYS_CORTEX_HOME, default ~/.nsys-cortex,
// file api.token), for WithToken.
func LocalToken() (string, error) {
	if t := os.Getenv("NSYS_CORTEX_API_TOKEN"); t != "" {
		return t, nil
	}
	home := os.Getenv("NSYS_CORTEX_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		home = filepath.Join(h, ".nsys-cortex")
	}
	b, err := os.ReadFile(filepath.Join(home, "api.token"))
	if err != nil {
		return "", fmt.Errorf("no NSYS_CORTEX_API_TOKEN, and the daemon's own token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// WithHTTPClient uses hc (its transport, proxies and TLS) instead of a
// client of the SDK's own; do not give it a Timeout, or streams end with it.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the daemon at baseURL (http://host:port).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the API address %q is not an http:// or https:// URL with a host", baseURL)
	}
	c := &Client{base: u}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.DisableCompression = true
		c.hc = &http.Client{Transport: t}
	}
	return c, nil
}

// URL returns the daemon's address.
func (c *Client) URL() string { return c.base.String() }

// request builds a request of path (under the base URL) with query q.
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends req and returns the response of a 2xx answer; any other is
// returned as the typed error of its code.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, responseError(resp)
}

// responseError reads an error answer.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" {
		return APIError{Status: resp.StatusCode, Code: CodeInternal,
			Message: fmt.Sprintf("%s %s: %s: %s", resp.Request.Method, resp.Request.URL.Path, resp.Status, bytes.TrimSpace(b))}
	}
	eb.Error.Status = resp.StatusCode
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 {
		eb.Error.RetryAfter = time.Duration(n) * time.Second
	}
	return eb.Error.Typed()
}

// call sends a JSON request (in may be nil) and decodes the answer into
// out (which may be nil).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// Health reports the daemon's state.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	return &h, c.call(ctx, "GET", "/v1/health", nil, nil, &h)
}

// Create starts a neuron (or brings one back with its data).
func (c *Client) Create(ctx context.Context, r *CreateRequest) (*Created, error) {
	if r == nil {
		r = &CreateRequest{}
	}
	var out Created
	return &out, c.call(ctx, "POST", "/v1/neurons", nil, r, &out)
}

// Get returns one neuron.
func (c *Client) Get(ctx context.Context, id string) (*Neuron, error) {
	var n Neuron
	return &n, c.call(ctx, "GET", "/v1/neurons/"+url.PathEscape(id), nil, nil, &n)
}

// Destroy stops a neuron; wipe also deletes its data for good.
func (c *Client) Destroy(ctx context.Context, id string, wipe bool) error {
	q := url.Values{}
	if wipe {
		q.Set("wipe", "true")
	}
	return c.call(ctx, "DELETE", "/v1/neurons/"+url.PathEscape(id), q, nil, nil)
}

// Neuron returns a handle on neuron id for commands, processes, files and
// terminals. It makes no request.
func (c *Client) Neuron(id string) *NeuronClient {
	return &NeuronClient{c: c, id: id, prefix: "/v1/neurons/" + url.PathEscape(id)}
}

// NeuronClient is a handle on one neuron (see Client.Neuron).
type NeuronClient struct {
	c      *Client
	id     string
	prefix string
}

// ID returns the neuron's id.
func (n *NeuronClient) ID() string { return n.id }

// Health asks the neuron's agent about itself.
func (n *NeuronClient) Health(ctx context.Context) (*AgentHealth, error) {
	var h AgentHealth
	return &h, n.c.call(ctx, "GET", n.prefix+"/health", nil, nil, &h)
}

// Exec runs a command to completion and returns how it ended.
func (n *NeuronClient) Exec(ctx context.Context, r *ExecRequest) (*ExecResult, error) {
	var res ExecResult
	return &res, n.c.call(ctx, "POST", n.prefix+"/exec", nil, r, &res)
}

// ExecStream runs a command and streams its output as it comes: events
// "stdout" and "stderr" (Chunk), then "exit" (Result).
func (n *NeuronClient) ExecStream(ctx context.Context, r *ExecRequest) (*Stream, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	req, err := n.c.request(ctx, "POST", n.prefix+"/exec", url.Values{"stream": {"true"}}, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return n.c.stream(req)
}

// Start starts a background process.
func (n *NeuronClient) Start(ctx context.Context, r *StartRequest) (*ProcInfo, error) {
	var p ProcInfo
	return &p, n.c.call(ctx, "POST", n.prefix+"/processes", nil, r, &p)
}

// Processes lists the neuron's background processes and terminals.
func (n *NeuronClient) Processes(ctx context.Context) ([]ProcInfo, error) {
	var out struct {
		Processes []ProcInfo `json:"processes"`
	}
	return out.Processes, n.c.call(ctx, "GET", n.prefix+"/processes", nil, nil, &out)
}

// Process returns one process's state.
func (n *NeuronClient) Process(ctx context.Context, pid int) (*ProcInfo, error) {
	var p ProcInfo
	return &p, n.c.call(ctx, "GET", n.prefix+"/processes/"+strconv.Itoa(pid), nil, nil, &p)
}

// OutputOptions say where an output stream starts and whether it follows.
type OutputOptions struct {
	StdoutOffset, StderrOffset int64
	// NoFollow ends the stream after what the replay buffer holds.
	NoFollow bool
}

// Output streams a process's output: what its replay buffer holds from
// the offsets, then (unless NoFollow) what comes until it exits. Events:
// "stdout", "stderr" (Chunk), "gap" (Gap), then "end" (Process).
func (n *NeuronClient) Output(ctx context.Context, pid int, o OutputOptions) (*Stream, error) {
	q := url.Values{}
	if o.StdoutOffset > 0 {
		q.Set("stdoutOffset", strconv.FormatInt(o.StdoutOffset, 10))
	}
	if o.StderrOffset > 0 {
		q.Set("stderrOffset", strconv.FormatInt(o.StderrOffset, 10))
	}
	if o.NoFollow {
		q.Set("follow", "false")
	}
	req, err := n.c.request(ctx, "GET", n.prefix+"/processes/"+strconv.Itoa(pid)+"/output", q, nil)
	if err != nil {
		return nil, err
	}
	return n.c.stream(req)
}

// Input writes data to a process's stdin (started with Stdin: true); eof
// closes it after.
func (n *NeuronClient) Input(ctx context.Context, pid int, data []byte, eof bool) error {
	q := url.Values{}
	if eof {
		q.Set("eof", "true")
	}
	req, err := n.c.request(ctx, "POST", n.prefix+"/processes/"+strconv.Itoa(pid)+"/input", q, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := n.c.do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Signal signals a process's whole process group ("TERM", "KILL", "INT", ...).
func (n *NeuronClient) Signal(ctx context.Context, pid int, signal string) error {
	return n.c.call(ctx, "POST", n.prefix+"/processes/"+strconv.Itoa(pid)+"/signal", nil, &SignalRequest{Signal: signal}, nil)
}

func jsonDecode(r io.Reader, v any) error {
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return fmt.Errorf("decoding the daemon's answer: %w", err)
	}
	return nil
}
