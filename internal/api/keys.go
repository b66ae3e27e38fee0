package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// KeyLimits are the limits of an API key that sets none of its own.
type KeyLimits struct {
	// Rate is the requests a second a key may send (bursts of twice as
	// many, at least 10); 0: no limit.
	Rate float64
	// Neurons is how many neurons, running or paused, a key may see
	// before its creates are refused; 0: no limit.
	Neurons int
}

// principalKey carries the request's principal (who the bearer token
// names) from authenticate to the gate.
type principalKey struct{}

// principalOf is who r acts for: an API key, or the daemon's own token.
func principalOf(r *http.Request) gate.Principal {
	if p, ok := r.Context().Value(principalKey{}).(gate.Principal); ok {
		return p
	}
	return gate.Principal{Kind: gate.APIClient}
}

// keyOf is the API key r was let in with (nil: the daemon's own token).
func keyOf(r *http.Request) *apikey.Key {
	k, _ := r.Context().Value(keyCtx{}).(*apikey.Key)
	return k
}

type keyCtx struct{}

// bearer is the credential of r's Authorization header.
func bearer(r *http.Request) string {
	scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}

// admitKey finds an API key, by its secret (or, when name is given, by
// its name: a signed URL's or an envd token's key), and takes one
// request from its rate. No such key: nil, 0, nil. Over its rate: the
// key and how long to wait.
func (s *Server) admitKey(secret, name string) (*apikey.Key, time.Duration, error) {
	if s.opts.Keys == nil {
		return nil, 0, nil
	}
	var k *apikey.Key
	var err error
	if name != "" {
		k, err = s.opts.Keys.Named(name)
	} else {
		k, err = s.opts.Keys.Lookup(secret)
	}
	if err != nil || k == nil {
		return nil, 0, err
	}
	if ok, wait := s.rateOK(k); !ok {
		return k, max(wait, time.Nanosecond), nil
	}
	return k, 0, nil
}

// withKey is r acting as key k.
func withKey(r *http.Request, k *apikey.Key) *http.Request {
	ctx := context.WithValue(r.Context(), principalKey{}, k.Principal())
	return r.WithContext(context.WithValue(ctx, keyCtx{}, k))
}

// limiters holds each key's request rate and the creates it has under
// way (counted against its neuron limit until they are done).
type limiters struct {
	mu       sync.Mutex
	byKey    map[string]*rate.Limiter
	creating map[string]int
	// importing counts each key's imports in flight ("": the daemon's
	// token), importsPerKey at most.
	importing map[string]int
}

// importsPerKey bounds the imports a key has in flight at once. Each
// holds a step of the room where neurons are kept for as long as its
// upload lasts (docs/export.md), so one caller's stalled uploads could
// otherwise reserve the room, a step a connection, from every other.
const importsPerKey = 2

// importSlot takes one of r's key's import slots, or answers 429 and
// returns false.
func (s *Server) importSlot(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	name, who := "", "the daemon's token"
	if k := keyOf(r); k != nil {
		name, who = k.Name, "key "+k.Name
	}
	l := &s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.importing == nil {
		l.importing = map[string]int{}
	}
	if l.importing[name] >= importsPerKey {
		// The upload is not read: closing the connection sends the answer
		// now. (Kept open, net/http reads up to 256 KiB of what is left
		// before it answers, so an uploader that sends slowly, or stalls,
		// would wait for its 429 as long.)
		w.Header().Set("Connection", "close")
		rateLimited(w, 5*time.Second, fmt.Sprintf("%s has %d imports in flight, the most it may: wait for one to end", who, importsPerKey))
		return nil, false
	}
	l.importing[name]++
	return func() {
		l.mu.Lock()
		l.importing[name]--
		l.mu.Unlock()
	}, true
}

// rateOK takes one request from key k's allowance, or says how long to
// wait for one.
func (s *Server) rateOK(k *apikey.Key) (bool, time.Duration) {
	perSec := k.Rate
	if perSec == 0 {
		perSec = s.opts.KeyLimits.Rate
	}
	if perSec <= 0 {
		return true, 0
	}
	l := &s.limits
	l.mu.Lock()
	if l.byKey == nil {
		l.byKey = map[string]*rate.Limiter{}
	}
	lim := l.byKey[k.Name]
	if lim == nil || lim.Limit() != rate.Limit(perSec) {
		lim = rate.NewLimiter(rate.Limit(perSec), max(10, int(math.Ceil(2*perSec))))
		l.byKey[k.Name] = lim
	}
	l.mu.Unlock()
	res := lim.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return false, d
	}
	return true, 0
}

// overRate answers 429 for key k, over its rate for wait.
func overRate(w http.ResponseWriter, k *apikey.Key, wait time.Duration) {
	rateLimited(w, wait, fmt.Sprintf("key %s is over its request rate: retry after the time Retry-After gives", k.Name))
}

// rateLimited answers 429 with a Retry-After of whole seconds.
func rateLimited(w http.ResponseWriter, wait time.Duration, msg string) {
	setRetryAfter(w, wait)
	writeError(w, cortex.APIError{Code: cortex.CodeRateLimited, Message: msg})
}

// setRetryAfter says to retry after wait, in whole seconds (at least 1).
func setRetryAfter(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
}

// reserveNeurons counts n new neurons against the neuron limit of the
// key r was let in with; it answers 429 itself and returns ok false when
// they do not fit. Call release when the creates are done (made or not).
func (s *Server) reserveNeurons(w http.ResponseWriter, r *http.Request, n int) (release func(), ok bool) {
	k := keyOf(r)
	if k == nil {
		return func() {}, true
	}
	limit := k.MaxNeurons
	if limit == 0 {
		limit = s.opts.KeyLimits.Neurons
	}
	if limit <= 0 {
		return func() {}, true
	}
	all, err := s.opts.Set.List(r.Context())
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	p := k.Principal()
	held := 0
	for _, st := range all {
		if st.Status != sandbox.StatusStopped && p.Sees(st.Labels) { // running, paused, or on its way
			held++
		}
	}
	l := &s.limits
	l.mu.Lock()
	if l.creating == nil {
		l.creating = map[string]int{}
	}
	if busy := held + l.creating[k.Name]; busy+n > limit {
		l.mu.Unlock()
		rateLimited(w, 5*time.Second, fmt.Sprintf("key %s may hold %d neurons (running or paused) and holds %d: stop or destroy one first", k.Name, limit, busy))
		return nil, false
	}
	l.creating[k.Name] += n
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.creating[k.Name] -= n
		l.mu.Unlock()
	}, true
}

// tenantLabels gives the labels a neuron made by r's key gets: want (the
// request's) with the key's selector's labels, which it may not contradict.
func tenantLabels(r *http.Request, want labels.Set) (labels.Set, error) {
	k := keyOf(r)
	if k == nil || len(k.Selector) == 0 {
		return want, nil
	}
	out := want.Clone()
	if out == nil {
		out = labels.Set{}
	}
	for key, v := range k.Selector {
		if got, ok := out[key]; ok && got != v {
			return nil, cortex.APIError{Code: cortex.CodePolicyDenied, Message: fmt.Sprintf(
				"labels: %s=%s is outside key %s's selector %s (its neurons are labelled %s=%s)", key, got, k.Name, k.Selector, key, v)}
		}
		out[key] = v
	}
	return out, nil
}

// tenantImport gives the labels a neuron imported by r's key gets: the
// archive's, with the key's selector's labels put over them (an archive
// is data, whoever's it was; the import is the key's).
func tenantImport(r *http.Request, archived labels.Set) labels.Set {
	k := keyOf(r)
	if k == nil || len(k.Selector) == 0 {
		return archived
	}
	out := archived.Clone()
	if out == nil {
		out = labels.Set{}
	}
	for key, v := range k.Selector {
		out[key] = v
	}
	return out
}

// hiddenNeuron is what a key is told of a neuron its selector does not
// match: what it would be told of one that does not exist.
func hiddenNeuron(w http.ResponseWriter, id string) {
	writeError(w, &sandbox.NotFoundError{ID: id})
}

// tenantCreate fits a create of id by r's key to its selector: a neuron
// of that id that the key does not see is not its to start (its id is
// taken); the neuron gets the selector's labels (an existing one keeps
// its own unless the create gives labels).
func (s *Server) tenantCreate(r *http.Request, id string, opts *sandbox.CreateOptions) error {
	k := keyOf(r)
	if k == nil || len(k.Selector) == 0 {
		return nil
	}
	if l, exists, kept := s.labelsOf(r.Context(), id); kept {
		if !k.Principal().Sees(l) {
			return idTaken(id)
		}
		if exists && opts.Labels == nil {
			return nil
		}
	}
	l, err := tenantLabels(r, opts.Labels)
	opts.Labels = l
	return err
}

// idTaken answers a key's create of an id another tenant holds. (That the
// id is taken is all it learns: ids are one namespace; a create without
// an id gets a fresh one.)
func idTaken(id string) error {
	return errdefs.Errorf(errdefs.Exists, "neuron id %s is taken: choose another, or leave the id out for a fresh one", id)
}

// othersHold reports whether neuron id exists and r's principal does not
// see it (a new neuron's id another tenant holds).
func (s *Server) othersHold(r *http.Request, id string) bool {
	p := principalOf(r)
	if p.Selector.Empty() {
		return false
	}
	l, _, kept := s.labelsOf(r.Context(), id)
	return kept && !p.Sees(l)
}

// labelsOf is what decides who sees id: the labels of the neuron of that
// id (exists), else those a wiped neuron left with its snapshots, which
// outlive it (kept is false when there are neither: the id is free).
func (s *Server) labelsOf(ctx context.Context, id string) (l labels.Set, exists, kept bool) {
	if _, st, err := s.opts.Set.FindExact(ctx, id); err == nil {
		return st.Labels, true, true
	}
	if ids.Validate(id) != nil {
		return nil, false, false
	}
	if kl, ok := store.KeptLabels(s.opts.Set.Layout().SnapshotsDir(id)); ok {
		return labels.Set(kl), false, true
	}
	return nil, false, false
}

// tenantSees reports whether r's principal sees neuron id (a second
// neuron a request names: a diff's other side).
func (s *Server) tenantSees(r *http.Request, id string) bool {
	p := principalOf(r)
	if p.Selector.Empty() {
		return true
	}
	l, _, kept := s.labelsOf(r.Context(), id)
	return kept && p.Sees(l)
}

// tenantChange refuses a label change by r's key that would take a
// neuron out of its selector (or into another tenant's).
func tenantChange(r *http.Request, c labels.Change) error {
	k := keyOf(r)
	if k == nil {
		return nil
	}
	for key, v := range k.Selector {
		got, set := c.Set[key]
		if set && got != v || slices.Contains(c.Remove, key) {
			return cortex.APIError{Code: cortex.CodePolicyDenied, Message: fmt.Sprintf(
				"label %s: key %s's neurons are labelled %s=%s (its selector); it may not change that", key, k.Name, key, v)}
		}
	}
	return nil
}
