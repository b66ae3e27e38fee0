package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/ids"
)

// The E2B-compatible API (serve --e2b; docs/e2b.md). Its control plane
// under /e2b is a translation: each E2B call becomes a call of the native
// route that does the same, served in this process through the same mux,
// so the gate, the tenants' selectors, the keys' limits and the events are
// those of the native API, and nothing is decided twice. Its answers are
// translated back into E2B's shapes; its errors into E2B's {code, message}.

const (
	// E2BPrefix is where the control plane is mounted (E2B_API_URL).
	E2BPrefix = "/e2b"
	// E2BSandboxPrefix is where the in-sandbox plane (envd's routes) is
	// mounted (E2B_SANDBOX_URL).
	E2BSandboxPrefix = "/e2b/sandbox"
	// e2bEnvdPort is the port envd answers on in an E2B sandbox; the SDKs
	// address it by that number.
	e2bEnvdPort = 49983
	// e2bEnvdVersion is the envd version this server speaks for: what the
	// SDKs compare before they use a feature (0.5.2 closeStdin, 0.5.7
	// octet-stream and gzip uploads; 0.6.2's file metadata is not served).
	e2bEnvdVersion = "0.5.7"
	// e2bDefaultTimeout is E2B's timeout of a sandbox created without one.
	e2bDefaultTimeout = 300 * time.Second
	// e2bMaxTimeout bounds a timeout (E2B's is a day on its Pro tier).
	e2bMaxTimeout = 24 * time.Hour
	// e2bTraffic is the label a sandbox created through E2B's API carries:
	// "public", its host-routed ports (<port>-<id>.<domain>) are reached
	// by whoever reaches the listener, as E2B's are; "private" (created
	// with network.allowPublicTraffic false), they need its traffic access
	// token. A neuron without it (made on the native API) keeps the
	// native rule: the API's token or a signed URL. It is not shown as
	// metadata, and metadata may not set it.
	e2bTraffic = "e2b.nsys-cortex/traffic"
	// e2bTrafficHeader carries a traffic access token.
	e2bTrafficHeader = "E2b-Traffic-Access-Token"
)

// e2bSandbox is E2B's sandbox as its control plane answers it.
type e2bSandbox struct {
	SandboxID          string            `json:"sandboxID"`
	TemplateID         string            `json:"templateID"`
	Alias              string            `json:"alias,omitempty"`
	ClientID           string            `json:"clientID"`
	EnvdVersion        string            `json:"envdVersion"`
	EnvdAccessToken    string            `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string            `json:"trafficAccessToken,omitempty"`
	Domain             *string           `json:"domain"`
	StartedAt          *time.Time        `json:"startedAt,omitempty"`
	EndAt              *time.Time        `json:"endAt,omitempty"`
	State              string            `json:"state,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	CPUCount           int               `json:"cpuCount"`
	MemoryMB           int               `json:"memoryMB"`
	DiskSizeMB         int               `json:"diskSizeMB"`
}

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeE2BError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e2bError{Code: status, Message: fmt.Sprintf(format, args...)})
}

// recorder keeps a native route's answer for translation.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

// native serves method path (with a JSON body, when body is not nil) as
// r's principal through the native routes, and decodes a 2xx answer into
// out. Any other answer is written to w in E2B's shape, and native
// reports false.
func (s *Server) native(w http.ResponseWriter, r *http.Request, method, path string, body, out any) bool {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			writeE2BError(w, http.StatusInternalServerError, "%v", err)
			return false
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		writeE2BError(w, http.StatusBadRequest, "%v", err)
		return false
	}
	req.Host = r.Host
	req.RemoteAddr = r.RemoteAddr
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	s.mux.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 300 {
		var eb cortex.ErrorBody
		msg := strings.TrimSpace(rec.body.String())
		if json.Unmarshal(rec.body.Bytes(), &eb) == nil && eb.Error.Message != "" {
			msg = eb.Error.Message
		}
		if ra := rec.header.Get("Retry-After"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		writeE2BError(w, rec.status, "%s", msg)
		return false
	}
	if out != nil {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			writeE2BError(w, http.StatusInternalServerError, "reading the daemon's own answer: %v", err)
			return false
		}
	}
	return true
}

// e2bState is E2B's state of a neuron: running or paused; a neuron that
// is neither (stopped, its data kept; failed) is no E2B sandbox.
func e2bState(n cortex.Neuron) (string, bool) {
	switch n.Status {
	case "running", "pending":
		return "running", true
	case "paused":
		return "paused", true
	}
	return "", false
}

// e2bOf is neuron n as an E2B sandbox; with r, it carries the envd token
// r's credential gets (a create's, a connect's answer).
func (s *Server) e2bOf(n cortex.Neuron, r *http.Request) e2bSandbox {
	md := map[string]string{}
	for k, v := range n.Labels {
		if k != e2bTraffic {
			md[k] = v
		}
	}
	sb := e2bSandbox{SandboxID: n.ID, TemplateID: "base", ClientID: "cortex", EnvdVersion: e2bEnvdVersion,
		Metadata: md, CPUCount: 1, MemoryMB: 512}
	if s.opts.Domain != "" {
		d := s.opts.Domain
		sb.Domain = &d
	}
	if r != nil && !n.CreatedAt.IsZero() {
		sb.EnvdAccessToken = s.envdTokenOf(r, n.ID, n.CreatedAt)
		// The traffic token of a private sandbox, to a credential that may
		// reach its ports (bound to it, as the envd token is).
		if n.Labels[e2bTraffic] == "private" && s.allow(r.Context(), n.ID, gate.Port, "E2B trafficAccessToken") == nil {
			sb.TrafficAccessToken = s.credToken(trafficPurpose, n.ID, n.CreatedAt, keyOf(r))
		}
	}
	if !n.CreatedAt.IsZero() {
		t := n.CreatedAt
		sb.StartedAt = &t
	}
	if n.Deadline != nil {
		t := *n.Deadline
		sb.EndAt = &t
	} else if sb.StartedAt != nil {
		t := sb.StartedAt.Add(e2bMaxTimeout)
		sb.EndAt = &t
	}
	sb.State, _ = e2bState(n)
	return sb
}

// e2bCreate is E2B's create body (POST /sandboxes, /v2/sandboxes).
type e2bCreate struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

// e2bTimeout is a timeout in seconds as E2B sends it, checked.
func e2bTimeout(sec *int64) (time.Duration, error) {
	if sec == nil {
		return e2bDefaultTimeout, nil
	}
	if *sec <= 0 || *sec > int64(e2bMaxTimeout/time.Second) { // before a product that could overflow
		return 0, fmt.Errorf("timeout %d s: must be between 1 s and %d s", *sec, int64(e2bMaxTimeout/time.Second))
	}
	return time.Duration(*sec) * time.Second, nil
}

func (s *Server) e2bCreateSandbox(w http.ResponseWriter, r *http.Request) {
	var in e2bCreate
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(&in); err != nil {
		writeE2BError(w, http.StatusBadRequest, "the body is not E2B's create: %v", err)
		return
	}
	if in.TemplateID != "" && in.TemplateID != "base" {
		writeE2BError(w, http.StatusNotFound, "template '%s' not found: this Cortex serves the template base (the default neuron); docs/e2b.md", in.TemplateID)
		return
	}
	if len(in.MCP) > 0 && string(in.MCP) != "null" || len(in.VolumeMounts) > 0 && string(in.VolumeMounts) != "null" {
		writeE2BError(w, http.StatusBadRequest, "mcp and volumeMounts are not supported by this Cortex (docs/e2b.md)")
		return
	}
	timeout, err := e2bTimeout(in.Timeout)
	if err != nil {
		writeE2BError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var network struct {
		AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
		AllowOut           []string        `json:"allowOut"`
		DenyOut            []string        `json:"denyOut"`
		MaskRequestHost    json.RawMessage `json:"maskRequestHost"`
	}
	if len(in.Network) > 0 && string(in.Network) != "null" {
		if err := json.Unmarshal(in.Network, &network); err != nil {
			writeE2BError(w, http.StatusBadRequest, "network: %v", err)
			return
		}
	}
	if len(network.AllowOut) > 0 || len(network.DenyOut) > 0 || len(network.MaskRequestHost) > 0 && string(network.MaskRequestHost) != "null" {
		// Refused, not ignored: a sandbox must not run open that its
		// client asked to be closed.
		writeE2BError(w, http.StatusBadRequest, "network.allowOut, denyOut and maskRequestHost are not taken by this Cortex: its egress is the operator's policy (network allow; docs/e2b.md)")
		return
	}
	if _, ok := in.Metadata[e2bTraffic]; ok {
		writeE2BError(w, http.StatusBadRequest, "metadata %s is Cortex's own: set network.allowPublicTraffic instead", e2bTraffic)
		return
	}
	req := cortex.CreateRequest{Labels: maps.Clone(in.Metadata), TimeoutMs: timeout.Milliseconds(), OnTimeout: "wipe"}
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	req.Labels[e2bTraffic] = "public"
	if network.AllowPublicTraffic != nil && !*network.AllowPublicTraffic {
		req.Labels[e2bTraffic] = "private"
	}
	if in.AutoPause != nil && *in.AutoPause {
		req.OnTimeout = "pause"
	}
	for k, v := range in.EnvVars {
		req.Env = append(req.Env, k+"="+v)
	}
	slices.Sort(req.Env)
	// E2B's sandboxes reach the internet unless told not to; Cortex's
	// default is no network, and an operator opens it by policy, not a
	// client. So allow_internet_access true asks for what the operator's
	// default gives; false asks for none, which every mode can give.
	if in.AllowInternetAccess != nil && !*in.AllowInternetAccess {
		req.Network.Mode = "none"
	}
	var created cortex.Created
	if !s.native(w, r, "POST", "/v1/neurons", req, &created) {
		return
	}
	writeJSON(w, http.StatusCreated, s.e2bOf(created.Neuron, r))
}

// e2bNeuron fetches the neuron the path's sandboxID names, as r's
// principal (another tenant's is a 404, as one that does not exist).
func (s *Server) e2bNeuron(w http.ResponseWriter, r *http.Request) (cortex.Neuron, bool) {
	var n cortex.Neuron
	id, ok := e2bID(w, r)
	if !ok || !s.native(w, r, "GET", "/v1/neurons/"+id, nil, &n) {
		return n, false
	}
	if _, ok := e2bState(n); !ok {
		writeE2BError(w, http.StatusNotFound, "sandbox %s is %s, not running or paused (its data is kept: nsys-cortex create %s starts it again)", id, n.Status, id)
		return n, false
	}
	return n, true
}

// e2bID is the path's sandboxID, checked before it is used in a native
// path (an id is a name, never a path of its own).
func e2bID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("sandboxID")
	if err := ids.Validate(id); err != nil {
		writeE2BError(w, http.StatusNotFound, "sandbox %q not found: %v", id, err)
		return "", false
	}
	return id, true
}

func (s *Server) e2bGetSandbox(w http.ResponseWriter, r *http.Request) {
	if n, ok := s.e2bNeuron(w, r); ok {
		writeJSON(w, http.StatusOK, s.e2bOf(n, nil))
	}
}

func (s *Server) e2bKill(w http.ResponseWriter, r *http.Request) {
	// E2B's kill ends the sandbox for good: Cortex wipes the neuron.
	id, ok := e2bID(w, r)
	if ok && s.native(w, r, "DELETE", "/v1/neurons/"+id+"?wipe=true", nil, nil) {
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) e2bSetTimeout(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(&in); err != nil || in.Timeout == nil {
		writeE2BError(w, http.StatusBadRequest, "the body must be {\"timeout\": seconds}")
		return
	}
	d, err := e2bTimeout(in.Timeout)
	if err != nil {
		writeE2BError(w, http.StatusBadRequest, "%v", err)
		return
	}
	n, ok := s.e2bNeuron(w, r)
	if !ok {
		return
	}
	if s.e2bDeadline(w, r, n, d) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// e2bDeadline sets n's timeout to d from now, keeping what happens then
// (E2B's kill, a wipe, unless it was created to pause).
func (s *Server) e2bDeadline(w http.ResponseWriter, r *http.Request, n cortex.Neuron, d time.Duration) bool {
	onTimeout := n.OnTimeout
	if onTimeout == "" {
		onTimeout = "wipe"
	}
	return s.native(w, r, "POST", "/v1/neurons/"+url.PathEscape(n.ID)+"/timeout", cortex.TimeoutRequest{TimeoutMs: d.Milliseconds(), OnTimeout: onTimeout}, nil)
}

func (s *Server) e2bPause(w http.ResponseWriter, r *http.Request) {
	n, ok := s.e2bNeuron(w, r)
	if !ok {
		return
	}
	if n.Status == "paused" {
		writeE2BError(w, http.StatusConflict, "sandbox %s is already paused", n.ID)
		return
	}
	if s.native(w, r, "POST", "/v1/neurons/"+url.PathEscape(n.ID)+"/pause", cortex.PauseRequest{}, nil) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// e2bConnect resumes a paused sandbox (and sets its timeout when the body
// gives one): POST /v2/sandboxes/{id}/connect, and the older resume.
func (s *Server) e2bConnect(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(&in); err != nil {
			writeE2BError(w, http.StatusBadRequest, "the body is not JSON: %v", err)
			return
		}
	}
	n, ok := s.e2bNeuron(w, r)
	if !ok {
		return
	}
	status := http.StatusOK
	if n.Status == "paused" {
		if !s.native(w, r, "POST", "/v1/neurons/"+url.PathEscape(n.ID)+"/resume", struct{}{}, nil) {
			return
		}
		status = http.StatusCreated
	}
	if in.Timeout != nil {
		d, err := e2bTimeout(in.Timeout)
		if err != nil {
			writeE2BError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if !s.e2bDeadline(w, r, n, d) {
			return
		}
	}
	if n, ok = s.e2bNeuron(w, r); ok {
		writeJSON(w, status, s.e2bOf(n, r))
	}
}

// e2bList lists sandboxes: the metadata filter (a query string of
// key=value pairs, as the SDKs encode it), state, and pages by nextToken
// (the last id of the page before) with limit.
func (s *Server) e2bList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var sel []string
	if md := q.Get("metadata"); md != "" {
		pairs, err := url.ParseQuery(md)
		if err != nil {
			writeE2BError(w, http.StatusBadRequest, "metadata: %v", err)
			return
		}
		for k, vs := range pairs {
			for _, v := range vs {
				sel = append(sel, k+"="+v)
			}
		}
		slices.Sort(sel)
	}
	path := "/v1/neurons"
	if len(sel) > 0 {
		path += "?labelSelector=" + url.QueryEscape(strings.Join(sel, ","))
	}
	var list struct {
		Neurons []cortex.Neuron `json:"neurons"`
	}
	if !s.native(w, r, "GET", path, nil, &list) {
		return
	}
	states := map[string]bool{}
	for _, st := range q["state"] {
		for _, one := range strings.Split(st, ",") {
			states[one] = true
		}
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			writeE2BError(w, http.StatusBadRequest, "limit %q: must be 1 to 1000", l)
			return
		}
		limit = n
	}
	slices.SortFunc(list.Neurons, func(a, b cortex.Neuron) int { return strings.Compare(a.ID, b.ID) })
	after := q.Get("nextToken")
	out := []e2bSandbox{}
	for _, n := range list.Neurons {
		if after != "" && n.ID <= after {
			continue
		}
		if _, ok := e2bState(n); !ok {
			continue
		}
		sb := s.e2bOf(n, nil)
		if len(states) > 0 && !states[sb.State] {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", out[len(out)-1].SandboxID)
			break
		}
		out = append(out, sb)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) e2bMetrics(w http.ResponseWriter, r *http.Request) {
	var m cortex.Metrics
	id, ok := e2bID(w, r)
	if !ok || !s.native(w, r, "GET", "/v1/neurons/"+id+"/metrics", nil, &m) {
		return
	}
	type metric struct {
		Timestamp     time.Time `json:"timestamp"`
		TimestampUnix int64     `json:"timestampUnix"`
		CPUCount      int       `json:"cpuCount"`
		CPUUsedPct    float64   `json:"cpuUsedPct"`
		MemUsed       int64     `json:"memUsed"`
		MemTotal      int64     `json:"memTotal"`
		DiskUsed      int64     `json:"diskUsed"`
		DiskTotal     int64     `json:"diskTotal"`
	}
	writeJSON(w, http.StatusOK, []metric{{Timestamp: m.At, TimestampUnix: m.At.Unix(), CPUCount: 1,
		MemUsed: m.MemoryBytes, MemTotal: m.MemoryLimitBytes, DiskUsed: m.DiskBytes}})
}

// e2bFork forks a sandbox (POST /sandboxes/{id}/fork: {timeout, count}),
// answering one result per fork, as E2B does: the native fork, under new
// ids (<id>-1..<id>-N for several), each with its own timeout.
func (s *Server) e2bFork(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Timeout *int64 `json:"timeout"`
		Count   int    `json:"count"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(&in); err != nil {
			writeE2BError(w, http.StatusBadRequest, "the body is not E2B's fork: %v", err)
			return
		}
	}
	d, err := e2bTimeout(in.Timeout)
	if err != nil {
		writeE2BError(w, http.StatusBadRequest, "%v", err)
		return
	}
	src, ok := s.e2bNeuron(w, r)
	if !ok {
		return
	}
	var forks cortex.NeuronForks
	if !s.native(w, r, "POST", "/v1/neurons/"+src.ID+"/fork", cortex.NeuronForkRequest{ID: ids.New(), Count: in.Count}, &forks) {
		return
	}
	type result struct {
		Sandbox *e2bSandbox `json:"sandbox,omitempty"`
		Error   *e2bError   `json:"error,omitempty"`
	}
	out := make([]result, 0, len(forks.Neurons))
	for _, n := range forks.Neurons {
		rec := &recorder{header: http.Header{}}
		if !s.e2bDeadline(rec, r, n, d) {
			var e e2bError
			json.Unmarshal(rec.body.Bytes(), &e)
			out = append(out, result{Error: &e})
			continue
		}
		sb := s.e2bOf(n, r)
		out = append(out, result{Sandbox: &sb})
	}
	writeJSON(w, http.StatusCreated, out)
}

// e2bRefresh extends a sandbox's life (POST /sandboxes/{id}/refreshes:
// {duration} seconds from now; none: E2B's default timeout).
func (s *Server) e2bRefresh(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Duration *int64 `json:"duration"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(&in); err != nil {
			writeE2BError(w, http.StatusBadRequest, "the body must be {\"duration\": seconds}: %v", err)
			return
		}
	}
	d, err := e2bTimeout(in.Duration)
	if err != nil {
		writeE2BError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if n, ok := s.e2bNeuron(w, r); ok && s.e2bDeadline(w, r, n, d) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// e2bLogs are a sandbox's logs (GET /sandboxes/{id}/logs, and v2): what
// the host recorded of it (its lifecycle events: created, paused, timed
// out...), oldest first, from start (Unix ms) and at most limit of them.
// A command's output is not kept by Cortex: it went to its caller.
func (s *Server) e2bLogs(w http.ResponseWriter, r *http.Request) {
	n, ok := s.e2bNeuron(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := events.Filter{Neurons: []string{n.ID}, Since: n.CreatedAt}
	if v := q.Get("start"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			writeE2BError(w, http.StatusBadRequest, "start %q: Unix milliseconds", v)
			return
		}
		if t := time.UnixMilli(ms); t.After(f.Since) {
			f.Since = t
		}
	}
	limit := 1000
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 0 || l > 10000 {
			writeE2BError(w, http.StatusBadRequest, "limit %q: 0 to 10000", v)
			return
		}
		limit = l
	}
	evs, err := events.Open(s.opts.Set.Layout()).Read(f)
	if err != nil {
		writeE2BFailure(w, err)
		return
	}
	type line struct {
		Timestamp time.Time `json:"timestamp"`
		Line      string    `json:"line"`
	}
	type entry struct {
		Timestamp time.Time         `json:"timestamp"`
		Message   string            `json:"message"`
		Level     string            `json:"level"`
		Fields    map[string]string `json:"fields"`
	}
	out := struct {
		Logs       []line  `json:"logs"`
		LogEntries []entry `json:"logEntries"`
	}{Logs: []line{}, LogEntries: []entry{}}
	for _, ev := range evs[:min(len(evs), limit)] {
		msg := string(ev.Type)
		if ev.Reason != "" {
			msg += ": " + ev.Reason
		}
		out.Logs = append(out.Logs, line{Timestamp: ev.Time, Line: msg})
		out.LogEntries = append(out.LogEntries, entry{Timestamp: ev.Time, Message: msg, Level: "info",
			Fields: map[string]string{"event": string(ev.Type), "principal": ev.Principal}})
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bRoutes are the control plane's routes, under E2BPrefix.
func (s *Server) e2bRoutes(mux *http.ServeMux) {
	const sb = E2BPrefix + "/sandboxes/{sandboxID}"
	mux.HandleFunc("POST "+E2BPrefix+"/sandboxes", s.e2bCreateSandbox)
	mux.HandleFunc("POST "+E2BPrefix+"/v2/sandboxes", s.e2bCreateSandbox)
	mux.HandleFunc("GET "+E2BPrefix+"/sandboxes", s.e2bList)
	mux.HandleFunc("GET "+E2BPrefix+"/v2/sandboxes", s.e2bList)
	mux.HandleFunc("GET "+sb, s.e2bGetSandbox)
	mux.HandleFunc("DELETE "+sb, s.e2bKill)
	mux.HandleFunc("POST "+sb+"/timeout", s.e2bSetTimeout)
	mux.HandleFunc("POST "+sb+"/pause", s.e2bPause)
	mux.HandleFunc("POST "+sb+"/resume", s.e2bConnect)
	mux.HandleFunc("POST "+E2BPrefix+"/v2/sandboxes/{sandboxID}/connect", s.e2bConnect)
	mux.HandleFunc("GET "+sb+"/metrics", s.e2bMetrics)
	mux.HandleFunc("POST "+sb+"/fork", s.e2bFork)
	mux.HandleFunc("POST "+sb+"/refreshes", s.e2bRefresh)
	mux.HandleFunc("GET "+sb+"/logs", s.e2bLogs)
	mux.HandleFunc("GET "+E2BPrefix+"/v2/sandboxes/{sandboxID}/logs", s.e2bLogs)
	mux.HandleFunc(E2BPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeE2BError(w, http.StatusNotFound, "no E2B route %s %s on this Cortex (docs/e2b.md lists what is served)", r.Method, r.URL.Path)
	})
}
