package redact

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
)

// MinSecretLen is the shortest value AddSecret accepts, in characters.
// Shorter values ("admin", "1234") occur in ordinary output too often to
// mask without mangling it.
const MinSecretLen = 8

// Redactor masks registered secret values and well-known credential
// patterns. The zero value is not usable; call New. A Redactor is safe for
// concurrent use: Redact never blocks on AddSecret.
type Redactor struct {
	hashed  bool              // masks carry a hash prefix of what they hide (NewHashing)
	mu      sync.Mutex        // serialises AddSecret
	names   map[string]string // value (and each encoding of it) → name; guarded by mu
	secrets atomic.Pointer[[]secret]
	masks   atomic.Int64
}

type secret struct{ value, name string }

// New returns a Redactor that masks the built-in credential patterns and no
// registered values yet.
func New() *Redactor {
	r := &Redactor{names: map[string]string{}}
	r.secrets.Store(&[]secret{})
	return r
}

// NewHashing is New whose masks also carry the first 8 hex digits of the
// SHA-256 of what they hide, [REDACTED:name sha256:0123abcd]: a record
// (a launch receipt) that must not hold a secret can still tell which one
// was used, by comparing with the hash of a known value.
func NewHashing() *Redactor {
	r := New()
	r.hashed = true
	return r
}

// AddSecret registers value to be masked as [REDACTED:name] wherever it
// appears, together with the forms it takes when JSON-escaped, URL-encoded
// or base64-encoded. name is 1–64 of [A-Za-z0-9_.-] (it is printed in the
// mask). Values shorter than MinSecretLen characters are refused: they would
// mask ordinary words. Registering a value again renames it.
func (r *Redactor) AddSecret(name, value string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(value); n < MinSecretLen {
		return fmt.Errorf("redact: secret %s is %d characters; values shorter than %d are not masked "+
			"because they would match ordinary text too often", name, n, MinSecretLen)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range encodings(value) {
		r.names[v] = name
	}
	list := make([]secret, 0, len(r.names))
	for v, n := range r.names {
		list = append(list, secret{value: v, name: n})
	}
	// Longest first, so where two values match at the same place the mask
	// is named for the longer, more specific one.
	slices.SortFunc(list, func(a, b secret) int {
		return cmp.Or(cmp.Compare(len(b.value), len(a.value)), strings.Compare(a.value, b.value))
	})
	r.secrets.Store(&list)
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("redact: secret name must be 1 to 64 characters, got %d", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return fmt.Errorf("redact: secret name %q: only letters, digits, '_', '.' and '-' are allowed", name)
		}
	}
	return nil
}

// encodings returns value and the distinct forms it commonly takes in
// output, each at least MinSecretLen bytes.
func encodings(value string) []string {
	forms := []string{value, url.QueryEscape(value), url.PathEscape(value),
		base64.RawStdEncoding.EncodeToString([]byte(value)), // a prefix of the padded form too
		base64.RawURLEncoding.EncodeToString([]byte(value)),
	}
	if j, err := json.Marshal(value); err == nil { // \u003c for <, as encoding/json writes it
		forms = append(forms, string(j[1:len(j)-1]))
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(value); err == nil { // < as itself
		j := strings.TrimSuffix(b.String(), "\n")
		forms = append(forms, j[1:len(j)-1])
	}
	var out []string
	for _, f := range forms {
		if len(f) >= MinSecretLen && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Redact returns s with every secret masked. If s holds none it returns s
// itself.
func (r *Redactor) Redact(s string) string {
	out, _ := r.RedactCount(s)
	return out
}

// RedactCount is Redact that also reports how many masks it applied, for an
// audit record.
func (r *Redactor) RedactCount(s string) (string, int) {
	spans := r.find(s)
	if len(spans) == 0 {
		return s, 0
	}
	spans = merge(spans)
	r.masks.Add(int64(len(spans)))
	var b strings.Builder
	b.Grow(len(s) + 8*len(spans))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.start])
		b.WriteString("[REDACTED:")
		b.WriteString(sp.label)
		if r.hashed {
			sum := sha256.Sum256([]byte(s[sp.start:sp.end]))
			b.WriteString(" sha256:")
			b.WriteString(hex.EncodeToString(sum[:4]))
		}
		b.WriteByte(']')
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String(), len(spans)
}

// RedactBytes is Redact for a byte slice. If b holds no secret it returns b
// itself, so the result may share memory with b.
func (r *Redactor) RedactBytes(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	// A read-only view of b, used only during this call and never retained:
	// a copy would cost as much as the whole scan of a clean buffer.
	s := unsafe.String(unsafe.SliceData(b), len(b))
	out, n := r.RedactCount(s)
	if n == 0 {
		return b
	}
	return []byte(out)
}

// Count reports how many masks this Redactor has applied since New.
func (r *Redactor) Count() int64 { return r.masks.Load() }

// A span is a byte range of the input to mask. Lower prio names the mask
// when spans overlap: registered values (0) before patterns in table order.
type span struct {
	start, end int
	prio       int
	label      string
}

func (r *Redactor) find(s string) []span {
	var spans []span
	for _, sec := range *r.secrets.Load() {
		for i := 0; ; {
			j := strings.Index(s[i:], sec.value)
			if j < 0 {
				break
			}
			spans = append(spans, span{start: i + j, end: i + j + len(sec.value), label: sec.name})
			i += j + 1 // overlapping occurrences of one value merge below
		}
	}
	findPatterns(s, func(pat, start, end int) {
		spans = append(spans, span{start: start, end: end, prio: pat + 1, label: patterns[pat].kind})
	})
	return spans
}

// merge sorts spans and joins overlapping ones, so no fragment of a secret
// is left between two masks. The joined span takes the label of its
// highest-priority part.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.prio, b.prio), cmp.Compare(b.end, a.end))
	})
	out := spans[:1]
	for _, sp := range spans[1:] {
		cur := &out[len(out)-1]
		if sp.start >= cur.end {
			out = append(out, sp)
			continue
		}
		cur.end = max(cur.end, sp.end)
		if sp.prio < cur.prio {
			cur.prio, cur.label = sp.prio, sp.label
		}
	}
	return out
}
