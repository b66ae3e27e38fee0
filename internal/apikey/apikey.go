// Package apikey keeps the API keys of a home: named bearer tokens with
// scopes and a label selector, for the several teams or agents that share
// one daemon (nsys-cortex token create/list/rm). A key's secret is 32
// random bytes, shown once when it is made and kept only as its SHA-256;
// the daemon finds a key by the hash of the token it is sent.
//
// The keys live in <home>/api-keys.json (owner-only), which the CLI
// changes under a lock and replaces atomically; the daemon rereads it when
// it changes, so a key made or removed takes effect on the next request.
// When each key was last used is the daemon's to write, in a file of its
// own (<home>/api-keys.used.json), so a busy daemon never rewrites the
// keys.
//
// A deployment of several daemons (kube mode's replicas, whose homes are
// their own and go with their pods) keeps the keys where all of them
// read them instead: a Shared store (a Secret of the cluster), read
// again at most every sharedEvery. A Shared store that is also a
// SharedUse keeps when each key was last used too, so that a list
// through any replica shows the use through every one, and a replica's
// restart loses none of it.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Prefix starts every key's token, so that a token found in a log or a
// repository is recognizable as one of these.
const Prefix = "cxk_"

// E2BPrefix starts the tokens of keys made for E2B's SDKs (token create
// --e2b), which refuse a key that does not have that form: "e2b_" and
// hex. The key is the same kind of key; only its printed form differs.
const E2BPrefix = "e2b_"

// Key is one API key as kept: never its secret.
type Key struct {
	Name string `json:"name"`
	// Hash is "sha256:" and the hex SHA-256 of the whole token.
	Hash   string       `json:"hash,omitempty"`
	Scopes []gate.Scope `json:"scopes"`
	// Selector is the labels a neuron needs for the key to see it; the
	// neurons the key creates get them. Empty: every neuron.
	Selector labels.Set `json:"selector,omitempty"`
	Created  time.Time  `json:"created"`
	// Rate (requests a second) and MaxNeurons (neurons it sees, running or
	// paused) are the key's own limits; 0 takes the daemon's (api.key_rate,
	// api.key_neurons).
	Rate       float64 `json:"rate,omitempty"`
	MaxNeurons int     `json:"maxNeurons,omitempty"`
	// E2B makes the token in E2B's form (E2BPrefix and 64 hex digits).
	E2B bool `json:"e2b,omitempty"`
}

// Principal is who the key acts as, for the gate.
func (k *Key) Principal() gate.Principal {
	return gate.Principal{Kind: gate.APIClient, Name: k.Name, Scopes: slices.Clone(k.Scopes), Selector: labels.SelectorFromSet(k.Selector)}
}

// Listed is a key with when it was last used (zero: never).
type Listed struct {
	Key
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

type keysFile struct {
	Keys []Key `json:"keys"`
}

// Shared keeps the keys file's bytes where every daemon of a deployment
// reads them (kube.SecretKeys: a Secret).
type Shared interface {
	// Where names the place, for errors.
	Where() string
	// Load returns the bytes (nil: no keys yet) and a version that
	// changes whenever they do.
	Load() ([]byte, string, error)
	// Change stores fn's bytes in place of the ones fn is given, calling
	// fn again on bytes changed meanwhile by another writer.
	Change(fn func([]byte) ([]byte, error)) error
}

// SharedUse is a Shared store that also keeps when each key was last
// used (JSON: name -> time), beside the keys: every daemon writes what it
// saw, the latest time of each key kept.
type SharedUse interface {
	// LoadUsed returns the bytes (nil: none yet).
	LoadUsed() ([]byte, error)
	// ChangeUsed stores fn's bytes in place of the ones fn is given,
	// calling fn again on bytes changed meanwhile by another writer.
	ChangeUsed(fn func([]byte) ([]byte, error)) error
}

// sharedEvery is how often a daemon reads shared keys again: a key made
// or removed through one replica takes effect on the others within it.
const sharedEvery = time.Second

// Store is a home's keys.
type Store struct {
	path, lock, used string
	shared           Shared // nil: the keys are the home's file

	mu     sync.Mutex
	stamp  fileStamp
	byHash map[string]*Key
	// Of shared keys: when they were last read (from the read's start),
	// the version read, and what that read failed with.
	loaded  time.Time
	version string
	loadErr error
	// lastUsed is what this process saw; flushed to the used file (or
	// the SharedUse store: by one goroutine at a time, which closes
	// inflight when done and Flush waits for) at most every usedEvery.
	// closed: Flush was called, and no goroutine starts after it.
	lastUsed map[string]time.Time
	flushed  time.Time
	inflight chan struct{}
	closed   bool
}

// usedEvery is how often a daemon writes when its keys were last used.
const usedEvery = 10 * time.Second

// Open returns the store of lay's home (nothing is read yet).
func Open(lay layout.Layout) *Store {
	return &Store{path: filepath.Join(lay.Home, "api-keys.json"), lock: filepath.Join(lay.Home, "api-keys.lock"),
		used: filepath.Join(lay.Home, "api-keys.used.json"), lastUsed: map[string]time.Time{}}
}

// OpenShared returns the store of the keys sh keeps; when each was last
// used stays in lay's home, this daemon's own.
func OpenShared(lay layout.Layout, sh Shared) *Store {
	s := Open(lay)
	s.shared = sh
	return s
}

// validName: ^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$, by hand, since the
// expression compiled at init cost every command 240 allocations.
func validName(name string) bool {
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
	if len(name) == 0 || len(name) > 63 || !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return false
	}
	for i := range len(name) {
		if c := name[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// CheckName refuses a name that is not 1-63 lower-case letters, digits,
// '.', '_' or '-', starting and ending with a letter or digit.
func CheckName(name string) error {
	if !validName(name) {
		return fmt.Errorf("key name %q: 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// ParseSelector reads a key's selector, KEY=VALUE[,KEY=VALUE...]: only
// equalities, since the neurons the key creates get exactly these labels.
func ParseSelector(s string) (labels.Set, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var parts []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if !strings.Contains(p, "=") || strings.ContainsAny(p, "!()") {
				return nil, fmt.Errorf("selector %q: a key's selector is KEY=VALUE pairs (the labels the key's neurons get)", s)
			}
			parts = append(parts, p)
		}
	}
	set, err := labels.ParseSet(parts)
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", s, err)
	}
	return set, nil
}

// NewToken makes a key's token: Prefix and 32 random bytes, base64url.
func NewToken() string {
	var raw [32]byte
	rand.Read(raw[:])
	return Prefix + base64.RawURLEncoding.EncodeToString(raw[:])
}

// NewE2BToken makes a token in E2B's form: E2BPrefix and 32 random bytes,
// hex.
func NewE2BToken() string {
	var raw [32]byte
	rand.Read(raw[:])
	return E2BPrefix + hex.EncodeToString(raw[:])
}

// HashOf is what a key keeps of token.
func HashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ErrExists is a create of a name that is taken.
var ErrExists = errors.New("a key of that name exists")

// ErrNotFound is a remove of a name that is not there.
var ErrNotFound = errors.New("no key of that name")

// Create makes key k (its Hash and Created are set here) and returns its
// token, which is never shown again.
func (s *Store) Create(k Key) (string, *Key, error) {
	if err := CheckName(k.Name); err != nil {
		return "", nil, err
	}
	if len(k.Scopes) == 0 {
		return "", nil, fmt.Errorf("key %s: no scope", k.Name)
	}
	if err := k.Selector.Validate(); err != nil {
		return "", nil, fmt.Errorf("key %s: selector: %w", k.Name, err)
	}
	if k.Rate < 0 || k.MaxNeurons < 0 {
		return "", nil, fmt.Errorf("key %s: a limit cannot be negative", k.Name)
	}
	token := NewToken()
	if k.E2B {
		token = NewE2BToken()
	}
	k.Hash, k.Created = HashOf(token), time.Now().UTC().Truncate(time.Second)
	err := s.change(func(f *keysFile) error {
		for _, o := range f.Keys {
			if o.Name == k.Name {
				return fmt.Errorf("key %s: %w (nsys-cortex token rm %s first)", k.Name, ErrExists, k.Name)
			}
			// Tenants are told apart by one set of label keys: with team=a
			// beside env=prod, a neuron labelled both would be both
			// tenants', and either could label its own into the other's.
			if len(k.Selector) > 0 && len(o.Selector) > 0 && !slices.Equal(keysOf(k.Selector), keysOf(o.Selector)) {
				return fmt.Errorf("key %s: its selector names the labels %s, and key %s's names %s: every tenant key's selector must name the same labels (one tenant label, e.g. team=...)",
					k.Name, strings.Join(keysOf(k.Selector), ","), o.Name, strings.Join(keysOf(o.Selector), ","))
			}
		}
		f.Keys = append(f.Keys, k)
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	return token, &k, nil
}

// Remove removes key name: the daemon refuses its token from its next
// request on.
func (s *Store) Remove(name string) error {
	err := s.change(func(f *keysFile) error {
		i := slices.IndexFunc(f.Keys, func(k Key) bool { return k.Name == name })
		if i < 0 {
			return fmt.Errorf("key %s: %w (nsys-cortex token list shows them)", name, ErrNotFound)
		}
		f.Keys = slices.Delete(f.Keys, i, i+1)
		return nil
	})
	if err == nil {
		// Its record of use goes with it (a key made again under the
		// name starts unused); a record of use, never worth failing for.
		drop := func(b []byte) ([]byte, error) {
			used := parseUsed(b)
			delete(used, name)
			return json.Marshal(used)
		}
		if su, ok := s.shared.(SharedUse); ok {
			su.ChangeUsed(drop)
		} else if b, err := os.ReadFile(s.used); err == nil {
			if nb, err := drop(b); err == nil {
				store.WriteFileAtomic(s.used, nb, 0o600)
			}
		}
	}
	return err
}

// List returns the keys by name, each with when it was last used.
func (s *Store) List() ([]Listed, error) {
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	// The record of use is read as far as it can be: a damaged one (a
	// daemon's write cut short, a hand-edited Secret) shows the keys as
	// unused, and the next flush writes it afresh; it never keeps the
	// keys from being listed, nor a daemon from starting.
	var b []byte
	if su, ok := s.shared.(SharedUse); ok {
		if b, err = su.LoadUsed(); err != nil {
			return nil, fmt.Errorf("the keys' last use (%s): %w", s.shared.Where(), err)
		}
	} else if b, err = os.ReadFile(s.used); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the keys' last use (%s): %w", s.used, err)
	}
	used := parseUsed(b)
	out := make([]Listed, len(f.Keys))
	for i, k := range f.Keys {
		out[i] = Listed{Key: k, LastUsed: used[k.Name]}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Lookup finds the key whose token this is, rereading the keys when the
// file changed; it notes the use. A token of no key gives nil.
func (s *Store) Lookup(token string) (*Key, error) {
	if !strings.HasPrefix(token, Prefix) && !strings.HasPrefix(token, E2BPrefix) {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return nil, err
	}
	k := s.byHash[HashOf(token)]
	if k == nil {
		return nil, nil
	}
	now := time.Now().UTC().Truncate(time.Second)
	s.lastUsed[k.Name] = now
	if now.Sub(s.flushed) >= usedEvery {
		s.flushLocked()
	}
	return k, nil
}

// Keys are the keys as the file holds them now (reread only when it
// changed), in no order; they are the store's: read them, change none.
func (s *Store) Keys() ([]*Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return nil, err
	}
	out := make([]*Key, 0, len(s.byHash))
	for _, k := range s.byHash {
		out = append(out, k)
	}
	return out, nil
}

// Named returns key name as the file holds it now (nil: there is none),
// noting the use: a signed URL a key made is that key's to use.
func (s *Store) Named(name string) (*Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return nil, err
	}
	for _, k := range s.byHash {
		if k.Name == name {
			s.lastUsed[k.Name] = time.Now().UTC().Truncate(time.Second)
			return k, nil
		}
	}
	return nil, nil
}

// Flush writes when each key was last used (a daemon stopping), after
// the write to the shared store in flight, if any; no write starts after
// it but its own.
func (s *Store) Flush() {
	s.mu.Lock()
	s.closed = true
	inflight := s.inflight
	s.mu.Unlock()
	if inflight != nil {
		<-inflight
	}
	s.mu.Lock()
	seen, su := s.seenLocked()
	s.mu.Unlock()
	if su != nil {
		su.ChangeUsed(func(b []byte) ([]byte, error) { return mergeUsed(b, seen) })
	}
}

// flushLocked writes when each key was last used: to the home's file,
// or, with a SharedUse store, from a goroutine of its own (one at a
// time, none after Flush: a request never waits on the cluster).
func (s *Store) flushLocked() {
	s.flushed = time.Now()
	if s.closed || s.inflight != nil {
		return
	}
	seen, su := s.seenLocked()
	if su == nil {
		return
	}
	done := make(chan struct{})
	s.inflight = done
	go func() {
		defer close(done)
		su.ChangeUsed(func(b []byte) ([]byte, error) { return mergeUsed(b, seen) }) // a record of use, never worth failing a request
		s.mu.Lock()
		s.inflight = nil
		s.mu.Unlock()
	}()
}

// seenLocked returns what this process saw of the keys' use, of the
// keys it knows now (all it saw, before it has read them): written to
// the home's file here, or returned with the SharedUse store for the
// caller to write (nil: nothing to write).
func (s *Store) seenLocked() (map[string]time.Time, SharedUse) {
	var known map[string]bool
	if s.byHash != nil {
		known = map[string]bool{}
		for _, k := range s.byHash {
			known[k.Name] = true
		}
	}
	seen := map[string]time.Time{}
	for n, t := range s.lastUsed {
		if known == nil || known[n] {
			seen[n] = t
		}
	}
	if len(seen) == 0 {
		return nil, nil
	}
	if su, ok := s.shared.(SharedUse); ok {
		return seen, su
	}
	old, _ := os.ReadFile(s.used)
	if b, err := mergeUsed(old, seen); err == nil {
		_ = store.WriteFileAtomic(s.used, b, 0o600) // a record of use, never worth failing a request
	}
	return nil, nil
}

// mergeUsed is the record of use b with seen's times where they are
// later. It drops nothing: a key's record goes when the key is removed
// (Remove), not when a daemon that has not read the keys since it was
// made does not know it.
func mergeUsed(b []byte, seen map[string]time.Time) ([]byte, error) {
	used := parseUsed(b)
	for n, t := range seen {
		if t.After(used[n]) {
			used[n] = t
		}
	}
	return json.Marshal(used)
}

// parseUsed reads a record of use; a damaged one (or none) is empty.
func parseUsed(b []byte) map[string]time.Time {
	var used map[string]time.Time
	if len(b) == 0 || json.Unmarshal(b, &used) != nil || used == nil {
		return map[string]time.Time{}
	}
	return used
}

// fileStamp tells versions of the keys file apart.
type fileStamp struct {
	ino, size int64
	mtime     int64
	present   bool
}

func stampOf(path string) (fileStamp, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return fileStamp{}, nil
		}
		return fileStamp{}, err
	}
	return fileStamp{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), present: true}, nil
}

// reload rereads the keys when the file is not the one read last (shared
// keys: when they were read sharedEvery ago, and changed since).
func (s *Store) reload() error {
	if s.shared != nil {
		if (s.byHash != nil || s.loadErr != nil) && time.Since(s.loaded) < sharedEvery {
			return s.loadErr // a failed read is not tried again for each request
		}
		// The read is made holding the lock: requests wait for it once a
		// second, rather than go on with keys that may have been removed.
		start := time.Now()
		b, version, err := s.shared.Load()
		s.loaded, s.loadErr = start, nil
		if err != nil {
			// Refused, not served from what was read before: a key removed
			// meanwhile must not keep working.
			s.byHash, s.loadErr = nil, fmt.Errorf("the API keys (%s): %w", s.shared.Where(), err)
			return s.loadErr
		}
		if s.byHash != nil && version == s.version {
			return nil
		}
		f, err := parse(b, s.shared.Where())
		if err != nil {
			s.byHash, s.loadErr = nil, err
			return err
		}
		s.byHash, s.version = index(f), version
		return nil
	}
	st, err := stampOf(s.path)
	if err != nil {
		return fmt.Errorf("the API keys (%s): %w", s.path, err)
	}
	if s.byHash != nil && st == s.stamp {
		return nil
	}
	f, err := s.read()
	if err != nil {
		return err
	}
	s.byHash, s.stamp = index(f), st
	return nil
}

// index is f's keys by hash.
func index(f *keysFile) map[string]*Key {
	by := make(map[string]*Key, len(f.Keys))
	for i := range f.Keys {
		by[f.Keys[i].Hash] = &f.Keys[i]
	}
	return by
}

// read reads the keys file; a missing one holds no keys. The file must
// be the owner's alone: a key file others could write would let them
// mint keys.
func (s *Store) read() (*keysFile, error) {
	if s.shared != nil {
		b, _, err := s.shared.Load()
		if err != nil {
			return nil, fmt.Errorf("the API keys (%s): %w", s.shared.Where(), err)
		}
		return parse(b, s.shared.Where())
	}
	var f keysFile
	fi, err := os.Lstat(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return &f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the API keys (%s): %w", s.path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the API keys (%s): not a regular file of mode 0600 (it is %s); refusing it", s.path, fi.Mode())
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("the API keys (%s): %w", s.path, err)
	}
	return parse(b, s.path)
}

// maxShared bounds the shared keys' bytes (a Secret holds at most 1 MiB).
const maxShared = 1 << 20

// parse reads a keys file's bytes (none: no keys) from where, checking
// each key: a malformed one refuses them all rather than let a key in
// with less than it says.
func parse(b []byte, where string) (*keysFile, error) {
	var f keysFile
	if len(b) == 0 {
		return &f, nil
	}
	if len(b) > maxShared {
		return nil, fmt.Errorf("the API keys (%s): %d bytes, more than %d", where, len(b), maxShared)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("the API keys (%s): %w", where, err)
	}
	for _, k := range f.Keys {
		if CheckName(k.Name) != nil || !strings.HasPrefix(k.Hash, "sha256:") || len(k.Hash) != len("sha256:")+64 || len(k.Scopes) == 0 {
			return nil, fmt.Errorf("the API keys (%s): key %q is malformed", where, k.Name)
		}
		for _, sc := range k.Scopes {
			if !slices.Contains(gate.Scopes, sc) {
				return nil, fmt.Errorf("the API keys (%s): key %q has an unknown scope %q", where, k.Name, sc)
			}
		}
	}
	return &f, nil
}

// change applies fn to the keys under the home's key lock and replaces
// the file atomically.
func (s *Store) change(fn func(*keysFile) error) error {
	if s.shared != nil {
		err := s.shared.Change(func(b []byte) ([]byte, error) {
			f, err := parse(b, s.shared.Where())
			if err != nil {
				return nil, err
			}
			if err := fn(f); err != nil {
				return nil, err
			}
			return marshal(f)
		})
		s.mu.Lock()
		s.byHash, s.loadErr = nil, nil // read again at the next look
		s.mu.Unlock()
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(s.lock, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("the API keys' lock: %w", err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("the API keys' lock: %w", err)
	}
	f, err := s.read()
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		return err
	}
	b, err := marshal(f)
	if err != nil {
		return err
	}
	return store.WriteFileAtomic(s.path, b, 0o600)
}

// marshal is f as the keys file holds it, refused when it would be more
// than a store takes (every key would then be refused).
func marshal(f *keysFile) ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	if len(b) > maxShared {
		return nil, fmt.Errorf("the API keys would take %d bytes, more than %d: remove keys first (nsys-cortex token rm)", len(b), maxShared)
	}
	return b, nil
}

func keysOf(l labels.Set) []string {
	out := make([]string, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
