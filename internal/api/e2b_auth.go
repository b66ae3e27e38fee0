package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/ids"
)

// Who may use an E2B sandbox's envd plane (docs/e2b.md, "Authentication").
//
// A create or a connect answers the sandbox's envd access token, which
// the SDK sends on every envd request (X-Access-Token) and signs its file
// URLs with. The token is bound to three things: the neuron (its id and
// creation time: a later neuron of the same id is another sandbox), and
// the credential the create or connect was made with, the daemon's own
// token or an API key (its name and its hash: a key made again under the
// same name is another key). Each envd request then acts as that
// credential, looked up again: a removed key's tokens are void at once, a
// key's scopes and selector are those it has now, and its requests count
// against its rate. So an envd token never gives more than the key that
// got it may do through the native API.
//
// The token is an HMAC under the daemon's URL key, kept nowhere: it
// survives a restart of the daemon. A key's token carries the key's name
// after a '.', so that the request can name whom to look up.

// The purposes of the tokens a credential gets for a sandbox.
const (
	envdPurpose    = "e2b-envd"    // its envd plane (envdAccessToken)
	trafficPurpose = "e2b-traffic" // its private ports (trafficAccessToken)
)

// envdTokenFor is the envd token of the neuron id created at created, for
// key k (nil: the daemon's own token).
func (s *Server) envdTokenFor(id string, created time.Time, k *apikey.Key) string {
	return s.credToken(envdPurpose, id, created, k)
}

// credToken is the token for purpose of the neuron id created at created,
// for key k (nil: the daemon's own token).
func (s *Server) credToken(purpose, id string, created time.Time, k *apikey.Key) string {
	m := hmac.New(sha256.New, append([]byte(purpose+"\x00"), s.opts.URLKey...))
	m.Write([]byte(id + "\x00" + strconv.FormatInt(created.UnixNano(), 10) + "\x00"))
	if k == nil {
		t := sha256.Sum256([]byte(s.opts.Token))
		m.Write([]byte("token\x00"))
		m.Write(t[:])
		return hex.EncodeToString(m.Sum(nil))
	}
	m.Write([]byte("key\x00" + k.Name + "\x00" + k.Hash))
	return hex.EncodeToString(m.Sum(nil)) + "." + k.Name
}

// envdTokenOf is the envd token r's credential gets for the neuron.
func (s *Server) envdTokenOf(r *http.Request, id string, created time.Time) string {
	return s.envdTokenFor(id, created, keyOf(r))
}

// envdCredential is whom an envd request acts as.
type envdCredential struct {
	key *apikey.Key // nil: the daemon's token
}

func (c envdCredential) principal() gate.Principal {
	if c.key == nil {
		return gate.Principal{Kind: gate.APIClient, Name: "via e2b-envd"}
	}
	p := c.key.Principal()
	p.Name += " via e2b-envd"
	return p
}

// envdAuthError is why an envd request was not let in.
type envdAuthError struct {
	status int
	msg    string
	wait   time.Duration // over a key's rate: when to retry
}

// envdCreated is when the neuron id now was created (zero: there is none).
func (s *Server) envdCreated(ctx context.Context, id string) time.Time {
	if ids.Validate(id) != nil {
		return time.Time{}
	}
	_, st, err := s.opts.Set.FindExact(ctx, id)
	if err != nil {
		return time.Time{}
	}
	return st.CreatedAt
}

// envdByToken checks tok, an envd token, for the neuron id created at
// created, and finds whom it acts for.
func (s *Server) envdByToken(id string, created time.Time, tok string) (envdCredential, *envdAuthError) {
	return s.byCredToken(envdPurpose, id, created, tok)
}

// byCredToken checks tok, a token for purpose, for the neuron id created
// at created, and finds whom it acts for: its key, admitted now (there,
// the same key, within its rate), or the daemon's token.
func (s *Server) byCredToken(purpose, id string, created time.Time, tok string) (envdCredential, *envdAuthError) {
	bad := &envdAuthError{status: http.StatusUnauthorized, msg: "the " + purpose + " access token is missing or is not sandbox " + id + "'s"}
	if tok == "" || created.IsZero() || len(s.opts.URLKey) == 0 {
		return envdCredential{}, bad
	}
	mac, name, byKey := strings.Cut(tok, ".")
	if !byKey {
		if s.opts.Token == "" || !hmac.Equal([]byte(tok), []byte(s.credToken(purpose, id, created, nil))) {
			return envdCredential{}, bad
		}
		return envdCredential{}, nil
	}
	if len(mac) != 2*sha256.Size || apikey.CheckName(name) != nil {
		return envdCredential{}, bad
	}
	k, wait, err := s.admitKey("", name)
	switch {
	case err != nil:
		s.log.Error("reading the API keys", "err", err)
		return envdCredential{}, &envdAuthError{status: http.StatusInternalServerError, msg: "the daemon cannot read its API keys (its log says why)"}
	case k == nil:
		return envdCredential{}, &envdAuthError{status: http.StatusUnauthorized, msg: "the API key this " + purpose + " token was given to is removed: the token is void"}
	case !hmac.Equal([]byte(tok), []byte(s.credToken(purpose, id, created, k))):
		return envdCredential{}, bad
	case wait > 0:
		return envdCredential{}, &envdAuthError{status: http.StatusTooManyRequests, msg: "key " + k.Name + " is over its request rate", wait: wait}
	}
	return envdCredential{key: k}, nil
}

// envdBySignature checks a signed file URL (envd's GET or POST /files
// with signature= and, optionally, signature_expiration=): the SDKs sign
// "path:operation:username:token[:expiration]" with the sandbox's envd
// token, so the token is found among those the credentials that may hold
// one would have (the daemon's, each key's).
func (s *Server) envdBySignature(r *http.Request, id string, created time.Time) (envdCredential, *envdAuthError) {
	q := r.URL.Query()
	sig := q.Get("signature")
	bad := &envdAuthError{status: http.StatusUnauthorized, msg: "the file URL's signature is not valid for sandbox " + id}
	if !strings.HasPrefix(sig, "v1_") || created.IsZero() || len(s.opts.URLKey) == 0 || r.URL.Path != E2BSandboxPrefix+"/files" {
		return envdCredential{}, bad
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":"
	tail := ""
	if e := q.Get("signature_expiration"); e != "" {
		exp, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return envdCredential{}, &envdAuthError{status: http.StatusBadRequest, msg: "signature_expiration " + strconv.Quote(e) + " is not a Unix time"}
		}
		if time.Now().Unix() > exp {
			return envdCredential{}, &envdAuthError{status: http.StatusUnauthorized, msg: "the file URL expired at " + time.Unix(exp, 0).UTC().Format(time.RFC3339)}
		}
		tail = ":" + e
	}
	matches := func(tok string) bool {
		sum := sha256.Sum256([]byte(raw + tok + tail))
		want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
		return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
	}
	if s.opts.Token != "" && matches(s.envdTokenFor(id, created, nil)) {
		return envdCredential{}, nil
	}
	if s.opts.Keys == nil {
		return envdCredential{}, bad
	}
	keys, err := s.opts.Keys.Keys()
	if err != nil {
		s.log.Error("reading the API keys", "err", err)
		return envdCredential{}, &envdAuthError{status: http.StatusInternalServerError, msg: "the daemon cannot read its API keys (its log says why)"}
	}
	// Only the keys that could use the URL are tried: those that see the
	// neuron and may touch files.
	l, _, _ := s.labelsOf(r.Context(), id)
	for _, k := range keys {
		p := k.Principal()
		if !p.Sees(l) || !p.Allows(gate.FileRead) {
			continue
		}
		if matches(s.envdTokenFor(id, created, k)) {
			// The key, as it is now, and within its rate.
			return s.envdByToken(id, created, s.envdTokenFor(id, created, k))
		}
	}
	return envdCredential{}, bad
}

// e2bAuthenticate lets E2B's requests in by E2B's credentials, and hands
// every other request to rest: the control plane takes X-API-Key (the
// daemon's token, or a key of token create), the envd plane a sandbox's
// envd token (X-Access-Token), or a signed file URL, for the sandbox
// E2b-Sandbox-Id names.
func (s *Server) e2bAuthenticate(mux, envdMux *http.ServeMux, rest http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if port, id, under, err := s.hostTarget(r.Host); under && err == nil && port == e2bEnvdPort {
			// 49983-<id>.<domain>, the host E2B's SDKs reach envd at
			// without E2B_SANDBOX_URL: the envd plane, for that sandbox.
			r = r.Clone(r.Context())
			r.Header.Set("E2b-Sandbox-Id", id)
			r.Header.Del("E2b-Sandbox-Port")
			r.URL.Path = E2BSandboxPrefix + r.URL.Path
			r.URL.RawPath = ""
		} else if r.URL.Path == "/files" && r.Header.Get("E2b-Sandbox-Id") != "" {
			// The SDKs' file URLs (downloadUrl, uploadUrl) are "/files"
			// resolved against E2B_SANDBOX_URL, which drops its path: the
			// root's /files, for a sandbox named, is envd's.
			r = r.Clone(r.Context())
			r.URL.Path = E2BSandboxPrefix + "/files"
			r.URL.RawPath = ""
		}
		switch {
		case r.URL.Path == E2BSandboxPrefix || strings.HasPrefix(r.URL.Path, E2BSandboxPrefix+"/"):
			id := r.Header.Get("E2b-Sandbox-Id")
			if id == "" {
				writeE2BError(w, http.StatusBadRequest, "no sandbox: send the E2b-Sandbox-Id header (E2B_SANDBOX_URL mode) or reach %d-<id>.<domain>", e2bEnvdPort)
				return
			}
			if port := r.Header.Get("E2b-Sandbox-Port"); port != "" && port != strconv.Itoa(e2bEnvdPort) {
				writeE2BError(w, http.StatusNotFound, "port %s of sandbox %s: E2B's headers reach envd (%d) only; reach other ports at <port>-<id>.<domain> (serve --domain; docs/e2b.md)",
					port, id, e2bEnvdPort)
				return
			}
			// E2B's SDKs name the user a call runs as in a Basic header
			// (the files routes in ?username=, checked there). A Cortex
			// sandbox has one user: any other is refused, not ignored.
			var badUser error
			if u, _, ok := r.BasicAuth(); ok && u != "" && u != "user" {
				badUser = fmt.Errorf("user %q: a Cortex sandbox runs everything as its one user, \"user\" (the neuron's agent user); there is no root in a neuron (docs/e2b.md)", u)
				if !strings.HasPrefix(r.URL.Path, E2BSandboxPrefix+"/process.") && !strings.HasPrefix(r.URL.Path, E2BSandboxPrefix+"/filesystem.") {
					writeE2BError(w, http.StatusForbidden, "%v", badUser)
					return
				}
				// An RPC says it in Connect's terms (envd.client), so that
				// the SDK shows the message.
			}
			created := s.envdCreated(r.Context(), id)
			var cred envdCredential
			var aerr *envdAuthError
			signed := false
			if tok := r.Header.Get("X-Access-Token"); tok != "" || r.URL.Query().Get("signature") == "" {
				cred, aerr = s.envdByToken(id, created, tok)
			} else {
				cred, aerr = s.envdBySignature(r, id, created)
				signed = true
			}
			if aerr != nil {
				if aerr.wait > 0 {
					setRetryAfter(w, aerr.wait)
				}
				writeE2BError(w, aerr.status, "%s", aerr.msg)
				return
			}
			p := cred.principal()
			ctx := context.WithValue(r.Context(), principalKey{}, p)
			ctx = context.WithValue(ctx, envdSandboxKey{}, envdTarget{id: id, created: created})
			if cred.key != nil {
				ctx = context.WithValue(ctx, keyCtx{}, cred.key)
			}
			if badUser != nil {
				ctx = context.WithValue(ctx, envdBadUserKey{}, badUser)
			}
			if signed {
				// A signed URL is for its one path: an upload writes that
				// file only.
				ctx = context.WithValue(ctx, signedPathKey{}, r.URL.Query().Get("path"))
			}
			envdMux.ServeHTTP(w, r.WithContext(events.WithPrincipal(ctx, p.String())))
		case r.URL.Path == E2BPrefix || strings.HasPrefix(r.URL.Path, E2BPrefix+"/"):
			key := r.Header.Get("X-API-Key")
			if s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(key), []byte(s.opts.Token)) == 1 {
				mux.ServeHTTP(w, r)
				return
			}
			var k *apikey.Key
			var wait time.Duration
			var err error
			if key != "" {
				k, wait, err = s.admitKey(key, "")
			}
			switch {
			case err != nil:
				s.log.Error("reading the API keys", "err", err)
				writeE2BError(w, http.StatusInternalServerError, "the daemon cannot read its API keys (its log says why)")
			case k == nil:
				writeE2BError(w, http.StatusUnauthorized, "invalid API key: send X-API-Key with a key of nsys-cortex token create --e2b")
			case wait > 0:
				setRetryAfter(w, wait)
				writeE2BError(w, http.StatusTooManyRequests, "key %s is over its request rate", k.Name)
			default:
				mux.ServeHTTP(w, withKey(r, k))
			}
		default:
			rest.ServeHTTP(w, r)
		}
	})
}

// e2bPorts lets a request routed by its host to a port of a sandbox made
// through E2B's API (<port>-<id>.<domain>) in by E2B's rule: a public
// sandbox's ports are reached by whoever reaches the listener; a private
// one's with its traffic access token (E2b-Traffic-Access-Token). Such a
// request acts as "e2b-traffic", which may reach ports and nothing else.
// Any other request (a native neuron's port, one with the API's token or
// a signed URL) goes on to next: the native rule.
func (s *Server) e2bPorts(mux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hostRouted, _ := r.Context().Value(hostRoutedKey{}).(bool)
		id, _, isPort := portTarget(r)
		if !hostRouted || !isPort || r.Header.Get("Authorization") != "" {
			next.ServeHTTP(w, r)
			return
		}
		_, st, err := s.opts.Set.FindExact(r.Context(), id)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		p := gate.Principal{Kind: gate.APIClient, Name: "e2b-traffic", Scopes: []gate.Scope{gate.ScopeExec}}
		ctx := r.Context()
		switch st.Labels[e2bTraffic] {
		case "public":
		case "private":
			// Its traffic token acts as the credential that got it, as an
			// envd token does: a removed key's is void, and the gate asks
			// the key's scopes and selector about the port. Anything else
			// goes on to the native rule, which answers as it does for a
			// neuron that is not there.
			tok := r.Header.Get(e2bTrafficHeader)
			if tok == "" {
				next.ServeHTTP(w, r)
				return
			}
			cred, aerr := s.byCredToken(trafficPurpose, id, st.CreatedAt, tok)
			if aerr != nil {
				if aerr.wait > 0 {
					setRetryAfter(w, aerr.wait)
					writeE2BError(w, aerr.status, "%s", aerr.msg)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			p = cred.principal()
			p.Name = strings.Replace(p.Name, "via e2b-envd", "via e2b-traffic", 1)
			if cred.key != nil {
				ctx = context.WithValue(ctx, keyCtx{}, cred.key)
			}
		default:
			next.ServeHTTP(w, r)
			return
		}
		ctx = context.WithValue(ctx, principalKey{}, p)
		ctx = context.WithValue(ctx, portAuthKey{}, byE2BTraffic)
		mux.ServeHTTP(w, r.WithContext(events.WithPrincipal(ctx, p.String())))
	})
}

// signedPathKey carries the path a signed file URL was signed for.
type signedPathKey struct{}

// envdBadUserKey carries why the user an RPC asked to run as is refused.
type envdBadUserKey struct{}
