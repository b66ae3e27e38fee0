// Package api is the HTTP API of nsys-cortex serve: JSON routes under /v1
// over the sandbox set, SSE for streams, WebSocket for terminals,
// Prometheus metrics at /metrics. The wire types are the public SDK's
// (package client), so server and SDK cannot drift apart.
package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/pool"
)

// Defaults.
const (
	DefaultListen    = "127.0.0.1:3100"
	DefaultMaxUpload = 1 << 30
	// maxJSONBody bounds every JSON request body.
	maxJSONBody = 1 << 20
	// maxInputBody bounds one write to a process's stdin.
	maxInputBody = 16 << 20
)

// Options configure a Server.
type Options struct {
	// Set holds the modes; the server owns its neurons exclusively when the
	// set's Env says so.
	Set *sandbox.Set
	// Version of this build, reported by /v1/health.
	Version string
	// Token, when set, is required as "Authorization: Bearer TOKEN" on
	// every route.
	Token string
	// MaxUpload bounds a file upload (default DefaultMaxUpload).
	MaxUpload int64
	// Log receives one line per request (never the token); nil discards.
	Log *slog.Logger
	// TermLocks is the directory of the terminals' writer locks (shared
	// with local CLIs: <home>/terminals); "" takes none.
	TermLocks string
	// Chat serves the sessions routes (nil: they answer UNAVAILABLE).
	Chat *Chat
	// Gate authorizes every route's action (nil: a gate of its own that
	// allows the API's clients, recording nothing).
	Gate *gate.Gate
	// Domain, when set, routes requests to <port>-<id>.<Domain> to port
	// of neuron id (serve --domain): a browser opens a neuron's dev server
	// at the root of a name of its own.
	Domain string
	// URLKey signs port URLs (nsys-cortex url; portsign); nil: signed URLs
	// are refused.
	URLKey []byte
	// Images are the images a create may name besides those Cortex built
	// (a directory under the home's images/, an nsys-cortex-neuron tag):
	// the operator's list (api.images). Anything else is refused: an API
	// client must not base a neuron on any host directory it names.
	Images []string
	// Pools are the daemon's warm pools by mode (serve --pool): a create
	// in a mode with one claims a warm neuron when it can.
	Pools pool.Pools
	// Keys are the API keys (nsys-cortex token create) taken besides
	// Token: each acts with its scopes, on the neurons its selector sees.
	Keys *apikey.Store
	// KeyLimits are the limits of a key that sets none of its own.
	KeyLimits KeyLimits
	// E2B serves E2B's API besides (serve --e2b; docs/e2b.md): its control
	// plane under /e2b, its sandboxes' envd under /e2b/sandbox. It needs
	// URLKey, which signs the sandboxes' envd tokens.
	E2B bool
}

// Server serves the API.
type Server struct {
	opts    Options
	log     *slog.Logger
	started time.Time
	metrics *metrics
	handler http.Handler
	mux     *http.ServeMux // the routes, which E2B's translate into
	// ports reaches the neurons' ports (the port proxy), keeping
	// connections alive between requests.
	ports *http.Transport

	mu      sync.Mutex
	clients map[string]*link.Client
	chats   *chats
	// chatSync is what the daemon knows of its Chat.Store (nil: none).
	chatSync *chatSync

	limits limiters // the API keys' request rates and neuron counts

	// Streams that never end on their own (process output that follows,
	// terminals) end when the daemon stops: streams is cancelled then,
	// and streamWG counts the handlers still running.
	streams    context.Context
	endStreams context.CancelFunc
	streamWG   sync.WaitGroup
}

// errStopping ends the streams open when the daemon stops.
var errStopping = errdefs.New(errdefs.Unavailable, "the daemon is shutting down: attach again (from the offsets of the last events received) once it is back")

// streamContext is the context of a stream handler: it ends with the
// request, or when the daemon stops. Call done when the handler returns.
func (s *Server) streamContext(r *http.Request) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(s.streams, func() { cancel(errStopping) })
	s.streamWG.Add(1)
	return ctx, func() { stop(); cancel(nil); s.streamWG.Done() }
}

// Route is one served method and path pattern, and the action it asks
// the gate about before its handler runs.
type Route struct {
	Method, Pattern string
	handler         http.HandlerFunc
	Action          gate.Action
}

// New returns a server over opts.Set.
func New(opts Options) *Server {
	if opts.MaxUpload <= 0 {
		opts.MaxUpload = DefaultMaxUpload
	}
	if opts.E2B && len(opts.URLKey) == 0 {
		// The envd and traffic tokens are signed with it: without one of
		// the home's, they last as long as this process.
		opts.URLKey = make([]byte, 32)
		rand.Read(opts.URLKey)
	}
	s := &Server{opts: opts, log: opts.Log, started: time.Now(), clients: map[string]*link.Client{}}
	s.streams, s.endStreams = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.metrics = newMetrics(opts.Set, opts.Pools)
	s.ports = s.portTransport()
	s.startChats()
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.HandleFunc(r.Method+" "+r.Pattern, s.gated(r))
	}
	mux.Handle("GET /metrics", s.metrics.handler())
	var envdMux *http.ServeMux
	if opts.E2B {
		s.e2bRoutes(mux)
		envdMux = http.NewServeMux() // envd's routes only: an envd token reaches nothing else
		s.envdRoutes(envdMux)
	}
	s.mux = mux
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, cortex.APIError{Code: cortex.CodeNotFound,
			Message: fmt.Sprintf("no route %s %s (the routes are in api/openapi.yaml)", r.Method, r.URL.Path)})
	})
	s.handler = s.observe(s.probes(s.routeByHost(s.authenticate(mux)))) // refusals are counted too
	if opts.E2B {
		s.handler = s.observe(s.probes(s.e2bAuthenticate(mux, envdMux, s.routeByHost(s.e2bPorts(mux, s.authenticate(mux))))))
	}
	return s
}

// probes answers GET /healthz without a token, for a supervisor's
// liveness and readiness probes (a Kubernetes Deployment's): "ok" while
// the daemon serves, 503 once it is stopping, and nothing else about it
// (/v1/health, behind the token, says the version and modes). A request
// to a neuron's port by its host name is the neuron's, /healthz too.
func (s *Server) probes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if _, _, under, _ := s.hostTarget(r.Host); under {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if s.streams.Err() != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "stopping\n")
			return
		}
		io.WriteString(w, "ok\n")
	})
}

// Routes lists the /v1 routes (GET /metrics is served besides).
func (s *Server) Routes() []Route {
	const n, sn = "/v1/neurons/{id}", "/v1/sessions/{sid}"
	return []Route{
		{"GET", "/v1/health", s.health, gate.Read},
		{"GET", "/v1/neurons", s.listNeurons, gate.Read},
		{"POST", "/v1/neurons", s.createNeuron, gate.Create},
		{"GET", n, s.getNeuron, gate.Read},
		{"DELETE", n, s.destroyNeuron, gate.Destroy},
		{"GET", n + "/health", quietly(s.onNeuron(s.neuronHealth)), gate.Read},
		{"PATCH", n + "/labels", s.setLabels, gate.Label},
		{"POST", n + "/timeout", s.setTimeout, gate.Timeout},
		{"POST", n + "/pause", s.pause, gate.Pause},
		{"POST", n + "/resume", s.resume, gate.Resume},
		{"POST", n + "/fork", s.fork, gate.Fork},
		{"GET", n + "/ports/{port}/{path...}", s.portProxy, gate.Port},
		{"POST", n + "/ports/{port}/{path...}", s.portProxy, gate.Port},
		{"PUT", n + "/ports/{port}/{path...}", s.portProxy, gate.Port},
		{"PATCH", n + "/ports/{port}/{path...}", s.portProxy, gate.Port},
		{"DELETE", n + "/ports/{port}/{path...}", s.portProxy, gate.Port},
		{"OPTIONS", n + "/ports/{port}/{path...}", s.portProxy, gate.Port},
		{"GET", n + "/tunnel/{port}", s.tunnel, gate.Port},
		{"POST", n + "/urls", s.portURL, gate.Port},
		{"GET", n + "/export", s.exportNeuron, gate.Export},
		{"GET", n + "/diff", s.diffNeuron, gate.FileRead},
		{"POST", "/v1/neurons/import", s.importNeuron, gate.Import},
		{"GET", n + "/metrics", s.neuronMetrics, gate.Read},
		{"GET", "/v1/events", s.events, gate.Read},
		{"POST", n + "/exec", s.onNeuron(s.exec), gate.Exec},
		{"POST", n + "/processes", s.onNeuron(s.startProcess), gate.ProcessStart},
		{"GET", n + "/processes", s.onNeuron(s.listProcesses), gate.ProcessRead},
		{"GET", n + "/processes/{pid}", s.onNeuron(s.getProcess), gate.ProcessRead},
		{"GET", n + "/processes/{pid}/output", s.onNeuron(s.processOutput), gate.ProcessRead},
		{"POST", n + "/processes/{pid}/input", s.onNeuron(s.processInput), gate.ProcessInput},
		{"POST", n + "/processes/{pid}/signal", s.onNeuron(s.signalProcess), gate.ProcessSignal},
		{"GET", n + "/files", s.onNeuron(s.readFile), gate.FileRead},
		{"PUT", n + "/files", s.onNeuron(s.writeFile), gate.FileWrite},
		{"DELETE", n + "/files", s.onNeuron(s.removeFile), gate.FileWrite},
		{"GET", n + "/files/list", s.onNeuron(s.listFiles), gate.FileRead},
		{"GET", n + "/files/stat", s.onNeuron(s.statFile), gate.FileRead},
		{"POST", n + "/files/mkdir", s.onNeuron(s.mkdir), gate.FileWrite},
		{"POST", n + "/files/move", s.onNeuron(s.move), gate.FileWrite},
		{"POST", n + "/files/symlink", s.onNeuron(s.symlink), gate.FileWrite},
		{"GET", n + "/terminal", s.terminal, gate.TerminalOpen},
		{"GET", n + "/snapshots", s.listSnapshots, gate.SnapshotRead},
		{"POST", n + "/snapshots", s.createSnapshot, gate.SnapshotCreate},
		{"POST", n + "/snapshots/{name}/restore", s.restoreSnapshot, gate.SnapshotRestore},
		{"DELETE", n + "/snapshots/{name}", s.deleteSnapshot, gate.SnapshotRemove},
		{"GET", "/v1/sessions", s.listSessions, gate.Session},
		{"POST", "/v1/sessions", s.createSession, gate.Session},
		{"GET", sn, s.onSession(nil, false, s.getSession), gate.Session},
		{"PATCH", sn, s.onSession(&cortex.SessionUpdate{}, true, s.updateSession), gate.Session},
		{"DELETE", sn, s.closeSession, gate.Session},
		{"GET", sn + "/turns", s.onSession(nil, false, s.sessionTurns), gate.Session},
		{"POST", sn + "/turns", s.runTurn, gate.Session},
		{"POST", sn + "/compact", s.onSession(nil, true, s.compactSession), gate.Session},
		{"POST", sn + "/rewind", s.onSession(&cortex.RewindRequest{}, true, s.rewindSession), gate.Session},
		{"POST", sn + "/fork", s.onSession(&cortex.ForkRequest{}, true, s.forkSession), gate.Session},
	}
}

// quietly serves an inspection: its requests to the neuron neither
// resume a paused one (they answer NOT_RUNNING, "it is paused") nor keep
// an idle one awake (link.Quiet).
func quietly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h(w, r.WithContext(link.Quiet(r.Context()))) }
}

// gated asks the gate about r's action on the neuron the request names
// (its {id}), as the API's client, before r's handler runs: one gate for
// every route, so a route cannot forget it.
func (s *Server) gated(r Route) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		g := s.opts.Gate
		if g == nil {
			g = &gate.Gate{}
		}
		p := principalOf(req)
		if req.Context().Value(portAuthKey{}) == byE2BTraffic && r.Action != gate.Port {
			// E2B's public ports are ports, never the API behind them.
			writeError(w, cortex.APIError{Code: cortex.CodePolicyDenied, Message: "a sandbox's public port reaches that port only"})
			return
		}
		if req.Context().Value(portAuthKey{}) == bySignature {
			p = gate.Principal{Kind: gate.APIClient, Name: "signed-url"} // not the token's holder: audited apart
			if k := keyOf(req); k != nil {
				p = k.Principal() // a key's URL acts as the key, and says how
				p.Name += " via signed-url"
			}
		}
		id := req.PathValue("id")
		if err := s.check(req.Context(), g, p, id, r.Action, req.Method+" "+r.Pattern); err != nil {
			if gate.Hidden(err) {
				hiddenNeuron(w, id)
				return
			}
			writeError(w, cortex.APIError{Code: cortex.CodePolicyDenied, Message: err.Error()})
			return
		}
		// What the request does to neurons is recorded as the API's.
		r.handler(w, req.WithContext(events.WithPrincipal(req.Context(), p.String())))
	}
}

// check asks g whether p may do action on neuron id (none: "").
func (s *Server) check(ctx context.Context, g *gate.Gate, p gate.Principal, id string, action gate.Action, detail string) error {
	gr := &gate.Request{Principal: p, Neuron: id, Action: action, Detail: detail}
	if id != "" && !p.Selector.Empty() {
		// A key that sees some neurons only: the gate matches its
		// selector against the neuron's labels (none: it is hidden,
		// as a neuron that does not exist is).
		// A wiped neuron's snapshots are seen by its labels, kept with them.
		gr.Labels, _, _ = s.labelsOf(ctx, id)
	}
	return g.Allow(ctx, gr, nil)
}

// allow asks the gate whether the principal of ctx may do action on
// neuron id: the entry points that are no native route (E2B's envd
// plane) ask it through here.
func (s *Server) allow(ctx context.Context, id string, action gate.Action, detail string) error {
	g := s.opts.Gate
	if g == nil {
		g = &gate.Gate{}
	}
	p, ok := ctx.Value(principalKey{}).(gate.Principal)
	if !ok {
		p = gate.Principal{Kind: gate.APIClient}
	}
	if err := s.check(ctx, g, p, id, action, detail); err != nil {
		if gate.Hidden(err) {
			return errdefs.New(errdefs.NotFound, fmt.Sprintf("no sandbox %s", id))
		}
		return errdefs.New(errdefs.PolicyDenied, err.Error())
	}
	return nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// tokenOK reports whether r carries the API's token.
func (s *Server) tokenOK(r *http.Request) bool {
	scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(cred)), []byte(s.opts.Token)) == 1
}

// authenticate requires the bearer token when one is configured.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.opts.Token == "" {
		// No token: only loopback listens, and only requests that name a
		// loopback host are answered, so a web page that rebinds its own
		// name to 127.0.0.1 cannot drive the daemon.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !loopbackHost(r.Host) {
				writeError(w, cortex.APIError{Code: cortex.CodePolicyDenied, Message: fmt.Sprintf(
					"Host %q is not a loopback address: without a token this daemon answers only requests to localhost, 127.0.0.1 or [::1]", r.Host)})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokenOK := s.tokenOK(r)
		if !tokenOK && bearer(r) != "" {
			// An API key: it is let in as itself, within its rate.
			k, wait, err := s.admitKey(bearer(r), "")
			if err != nil {
				s.log.Error("reading the API keys", "err", err)
				writeError(w, cortex.APIError{Code: cortex.CodeInternal, Message: "the daemon cannot read its API keys (its log says why)"})
				return
			}
			if k != nil {
				if wait > 0 {
					overRate(w, k, wait)
					return
				}
				if r.URL.Path == "/metrics" && (len(k.Selector) > 0 || !k.Principal().Allows(gate.Read)) {
					writeError(w, cortex.APIError{Code: cortex.CodePolicyDenied, Message: fmt.Sprintf(
						"key %s may not read the daemon's metrics: they cover every neuron, and it sees only those of its selector %s", k.Name, k.Selector)})
					return
				}
				r, tokenOK = withKey(r, k), true
			}
		}
		if _, _, isPort := portTarget(r); isPort {
			// A port of a neuron: the token, or a signed URL for it.
			if tokenOK {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), portAuthKey{}, byToken)))
				return
			}
			if _, _, by, err := s.signedPort(r); err == nil {
				if by != "" {
					// A key's URL: the key must still be there, and its use is
					// the key's (its rate, its selector and scopes, its name).
					k, wait, err := s.admitKey("", by)
					if err != nil || k == nil {
						writeError(w, cortex.APIError{Code: cortex.CodeUnauthorized, Message: "the API key that made this signed URL was removed: the URL is void"})
						return
					}
					if wait > 0 {
						overRate(w, k, wait)
						return
					}
					r = withKey(r, k)
				}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), portAuthKey{}, bySignature)))
				return
			} else if r.Header.Get("Authorization") == "" && !errors.Is(err, errNoSignature) {
				writeError(w, cortex.APIError{Code: cortex.CodeUnauthorized, Message: err.Error()})
				return
			}
		}
		if !tokenOK {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nsys-cortex"`)
			msg := "this daemon requires a bearer token: send Authorization: Bearer $NSYS_CORTEX_API_TOKEN"
			if r.Header.Get("Authorization") != "" {
				msg = "the bearer token is wrong"
			}
			writeError(w, cortex.APIError{Code: cortex.CodeUnauthorized, Message: msg})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Serve answers on ln until ctx ends, then stops accepting, lets requests
// in flight finish for up to grace, and ends the streams still open.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	if err := CheckListener(ln.Addr(), s.opts.Token); err != nil {
		ln.Close()
		return err
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Protocols:         new(http.Protocols),
	}
	// HTTP/1.1, and HTTP/2 without TLS (h2c, prior knowledge): Connect
	// and gRPC clients speak it, E2B's envd plane among them.
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		s.endStreams()
		s.endChats()
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: no new requests; waiting for those in flight", "grace", grace)
	deadline := time.Now().Add(grace)
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Streams that follow (process output, terminals) never end on their
	// own: end them now, with an event that says why. Requests (an exec,
	// an upload) run on, up to the grace period.
	s.endStreams()
	defer s.ports.CloseIdleConnections()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("requests still running at the end of the grace period were cut", "grace", grace)
		hs.Close()
		err = nil
	}
	<-done
	// Terminals (hijacked connections) are not waited for by Shutdown.
	streamsDone := make(chan struct{})
	go func() { s.streamWG.Wait(); close(streamsDone) }()
	select {
	case <-streamsDone:
	case <-time.After(max(time.Until(deadline), time.Second)):
		s.log.Warn("streams still open after the grace period")
	}
	s.endChats()
	return err
}

// CheckListener refuses to serve without a token, on any address: a
// neuron with network full shares the host's network, loopback included,
// so a daemon that answered loopback clients without a token would run
// whatever such a neuron asked, in every neuron (serve makes a token when
// none is configured).
func CheckListener(addr net.Addr, token string) error {
	if token != "" {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without a token: anyone who reaches it — a neuron with network full reaches "+
		"loopback — could run commands in every neuron; set NSYS_CORTEX_API_TOKEN (or nsys-cortex config set api.token ...)", addr)
}

// client returns a channel client for neuron id (exact ids only: an API
// caller has the id it was given), cached while the neuron runs.
func (s *Server) client(ctx context.Context, id string) (*link.Client, error) {
	s.mu.Lock()
	c, ok := s.clients[id]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	m, st, err := s.opts.Set.FindExact(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err = m.Connect(ctx, st.ID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.clients[id] = c
	s.mu.Unlock()
	return c, nil
}

// forget drops the cached client of id.
func (s *Server) forget(id string) {
	s.mu.Lock()
	delete(s.clients, id)
	s.mu.Unlock()
}

// loopbackHost reports whether a Host header names this machine's
// loopback (localhost, 127.0.0.0/8, ::1), with or without a port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
