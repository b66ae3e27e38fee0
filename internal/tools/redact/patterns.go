package redact

import (
	"regexp"
	"strings"
	"sync"
)

// A pattern is one kind of well-known credential. Every pattern starts with
// a literal anchor (a vendor prefix or a label such as "authorization"); its
// regexp, anchored with ^, is tried only where that anchor occurs. Anchors
// are found by scanning for one rare byte of each with SIMD IndexByte (see
// triggers), so clean output costs a few fast passes and no regexp at all,
// and a regexp never scans more than the text it matches.
type pattern struct {
	kind    string
	anchors []string // where a match may start, case-sensitively
	fold    []string // or these, lower-case ASCII, ignoring case
	re      *lazyRE
	group   int    // submatch to mask; 0 masks the whole match
	token   string // bytes a credential is made of; see left, right
	left    bool   // the byte before the match must not be in token
	right   bool   // the byte after the match must not be in token
	valid   func(match string) bool
	// at replaces re: given the anchor's position, it reports the range to
	// mask.
	at func(s string, anchor int) (start, end int, ok bool)
}

const (
	alnum     = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	base64url = alnum + "_-"
)

// patterns, most specific first: when two overlap, the earlier names the
// mask.
var patterns = []*pattern{{
	kind:    "private_key",
	anchors: []string{"-----BEGIN "},
	at:      privateKey,
}, {
	kind:    "jwt",
	anchors: []string{"eyJ"},
	re:      lazy(`^eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`),
	token:   base64url, left: true,
}, {
	kind:    "anthropic_api_key",
	anchors: []string{"sk-ant-"},
	re:      lazy(`^sk-ant-[A-Za-z0-9_-]{20,}`),
	token:   base64url, left: true,
}, {
	kind:    "openai_api_key",
	anchors: []string{"sk-"},
	re:      lazy(`^sk-[A-Za-z0-9_-]{20,}`),
	token:   base64url, left: true,
	// Random keys have letters and digits; "sk-some-long-hyphenated-name"
	// does not.
	valid: func(m string) bool { return hasDigitAndLetter(m[3:]) },
}, {
	kind:    "aws_access_key_id",
	anchors: []string{"AKIA", "ASIA"},
	re:      lazy(`^A(?:KIA|SIA)[A-Z0-9]{16}`),
	token:   alnum, left: true, right: true,
}, {
	kind: "aws_secret_access_key",
	fold: []string{"secret_access_key", "secretaccesskey"},
	// aws_secret_access_key = …, AWS_SECRET_ACCESS_KEY=…, "SecretAccessKey": "…"
	re:    lazy(`(?i)^(?:secret_access_key|secretaccesskey)[\\"']{0,2}\s*[:=]\s*[\\"']{0,2}([A-Za-z0-9/+]{40})`),
	group: 1, token: alnum + "/+=", right: true,
}, {
	kind:  "session_token",
	fold:  []string{"session_token", "sessiontoken"},
	re:    lazy(`(?i)^(?:session_token|sessiontoken)[\\"']{0,2}\s*[:=]\s*[\\"']{0,2}([A-Za-z0-9/+=]{100,})`),
	group: 1,
}, {
	kind:    "github_token",
	anchors: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"},
	re:      lazy(`^gh[pousr]_[A-Za-z0-9]{36,}`),
	token:   alnum + "_", left: true,
}, {
	kind:    "github_token",
	anchors: []string{"github_pat_"},
	re:      lazy(`^github_pat_[A-Za-z0-9_]{50,}`),
	token:   alnum + "_", left: true,
}, {
	kind:    "gitlab_token",
	anchors: []string{"glpat-"},
	re:      lazy(`^glpat-[A-Za-z0-9_.-]{20,}`),
	token:   base64url, left: true,
}, {
	kind:    "slack_token",
	anchors: []string{"xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"},
	re:      lazy(`^xox[abprs]-[A-Za-z0-9-]{10,}`),
	token:   alnum + "-", left: true,
	valid: func(m string) bool { return hasDigitAndLetter(m[5:]) || strings.Count(m, "-") >= 3 },
}, {
	kind:    "google_api_key",
	anchors: []string{"AIza"},
	re:      lazy(`^AIza[A-Za-z0-9_-]{35}`),
	token:   base64url, left: true, right: true,
}, {
	kind:    "stripe_key",
	anchors: []string{"sk_live_", "rk_live_", "sk_test_", "rk_test_"},
	re:      lazy(`^[rs]k_(?:live|test)_[A-Za-z0-9]{20,}`),
	token:   alnum + "_", left: true,
}, {
	kind: "authorization",
	fold: []string{"authorization"},
	// Authorization: Bearer …, "authorization": "Basic …", Authorization: token …
	// Only the credential is masked; the scheme stays readable.
	re:    lazy(`(?i)^authorization[\\"']{0,2}\s*[:=]\s*[\\"']{0,2}(?:bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{8,})`),
	group: 1,
}, {
	kind:    "url_password",
	anchors: []string{"://"},
	at:      urlPassword,
}}

// tryAt tries p at start, where one of its anchors was found, and emits the
// range to mask if it matches. ok reports a match and end where it ends.
func (p *pattern) tryAt(s string, start int, emit func(start, end int)) (end int, ok bool) {
	if p.left && start > 0 && strings.IndexByte(p.token, s[start-1]) >= 0 {
		return 0, false
	}
	if p.at != nil {
		ms, me, ok := p.at(s, start)
		if ok {
			emit(ms, me)
		}
		return me, ok
	}
	loc := p.re.get().FindStringSubmatchIndex(s[start:])
	if loc == nil {
		return 0, false
	}
	end = start + loc[1]
	if p.right && end < len(s) && strings.IndexByte(p.token, s[end]) >= 0 {
		return 0, false
	}
	if p.valid != nil && !p.valid(s[start:end]) {
		return 0, false
	}
	if g := loc[2*p.group]; g >= 0 {
		emit(start+g, start+loc[2*p.group+1])
	}
	return end, true
}

// An anchor is found by scanning for its pivot, its rarest byte, and
// comparing the text around each hit.
type anchor struct {
	text  string
	fold  bool
	pivot int
	pat   int // index into patterns
}

// A trigger is one byte to scan for and the anchors that pivot on it.
type trigger struct {
	b       byte
	anchors []anchor
}

// triggers is built once from patterns. A case-insensitive anchor pivots on
// a letter and appears under both its cases.
var triggers = sync.OnceValue(buildTriggers)

// byteRarity orders bytes from rarest to most common in ordinary command
// output; a pivot is the anchor byte that comes first here.
const byteRarity = "JQXZjqxzKVWYUOGHFBPMLCDNRTSIEA:kvbpygfwmucldrhsnioate_/-. "

func buildTriggers() []trigger {
	var out []trigger
	add := func(b byte, a anchor) {
		for i := range out {
			if out[i].b == b {
				out[i].anchors = append(out[i].anchors, a)
				return
			}
		}
		out = append(out, trigger{b: b, anchors: []anchor{a}})
	}
	for i, p := range patterns {
		for _, t := range p.anchors {
			a := anchor{text: t, pivot: pivot(t), pat: i}
			add(t[a.pivot], a)
		}
		for _, t := range p.fold {
			a := anchor{text: t, fold: true, pivot: pivot(strings.ToUpper(t)), pat: i}
			add(t[a.pivot], a)
			add(t[a.pivot]&^0x20, a)
		}
	}
	return out
}

func pivot(text string) int {
	best, rank := 0, len(byteRarity)+1
	for k := 0; k < len(text); k++ {
		r := strings.IndexByte(byteRarity, text[k])
		if r < 0 {
			r = len(byteRarity)
		}
		if r < rank {
			best, rank = k, r
		}
	}
	return best
}

// maxPatterns bounds len(patterns) so findPatterns can keep per-pattern
// state in an array rather than allocate; TestPatternTable checks it.
const maxPatterns = 32

// findPatterns emits, with its pattern's index, every range to mask.
func findPatterns(s string, emit func(pat, start, end int)) {
	for _, tg := range triggers() {
		// Within one trigger hits come in order. An anchor inside a match
		// this trigger already found (a second "-----BEGIN " inside a key
		// block, say) is not tried again, which keeps adversarial input
		// from going quadratic.
		var found [maxPatterns]struct{ start, end int }
		for i := 0; i < len(s); {
			j := strings.IndexByte(s[i:], tg.b)
			if j < 0 {
				break
			}
			hit := i + j
			i = hit + 1
			for _, a := range tg.anchors {
				start := hit - a.pivot
				if start < 0 || start+len(a.text) > len(s) {
					continue
				}
				if c := s[start]; c != a.text[0] && !(a.fold && c|0x20 == a.text[0]) {
					continue // cheap reject before the full comparison
				}
				if f := found[a.pat]; f.start <= start && start < f.end {
					continue
				}
				if w := s[start : start+len(a.text)]; a.fold && !strings.EqualFold(w, a.text) || !a.fold && w != a.text {
					continue
				}
				pat := a.pat
				if end, ok := patterns[pat].tryAt(s, start, func(ms, me int) { emit(pat, ms, me) }); ok {
					found[pat].start, found[pat].end = start, end
				}
			}
		}
	}
}

// privateKey reports a PEM private key block starting at start: the whole
// block, or, when the output was cut before its END line, the header and
// the base64 body that follows it.
func privateKey(s string, start int) (int, int, bool) {
	h := pemHeader.get().FindStringIndex(s[start:])
	if h == nil {
		return 0, 0, false
	}
	body := start + h[1]
	for i := body; ; {
		j := strings.Index(s[i:], "-----END ")
		if j < 0 {
			break
		}
		if f := pemFooter.get().FindStringIndex(s[i+j:]); f != nil {
			return start, i + j + f[1], true
		}
		i += j + 1
	}
	end := body
	for end < len(s) && (isAlnum(s[end]) || strings.IndexByte("+/=:,.- \t\r\n", s[end]) >= 0) {
		end++
	}
	return start, end, true
}

var (
	pemHeader = lazy(`^-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----`)
	pemFooter = lazy(`^-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----`)
)

// urlPassword reports the password of scheme://user:password@host, given
// the index of "://".
func urlPassword(s string, sep int) (start, end int, ok bool) {
	if schemeStart(s, sep) == sep {
		return 0, 0, false // no scheme: "://" on its own
	}
	auth := sep + 3
	stop := auth
	for stop < len(s) && !isAuthorityEnd(s[stop]) {
		stop++
	}
	at := strings.LastIndexByte(s[auth:stop], '@')
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.IndexByte(s[auth:auth+at], ':')
	if colon < 0 {
		return 0, 0, false
	}
	pw := s[auth+colon+1 : auth+at]
	if pw == "" || isPlaceholder(pw) {
		return 0, 0, false
	}
	return auth + colon + 1, auth + at, true
}

// schemeStart returns where the URL scheme ending at sep begins, or sep if
// there is none. A scheme is a letter followed by letters, digits, + . -.
func schemeStart(s string, sep int) int {
	k := sep
	for k > 0 && (isAlnum(s[k-1]) || s[k-1] == '+' || s[k-1] == '.' || s[k-1] == '-') {
		k--
	}
	for k < sep && !isLetter(s[k]) { // "1http://" → "http"
		k++
	}
	return k
}

func isAuthorityEnd(c byte) bool {
	switch c {
	case '/', '?', '#', ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>', '\\':
		return true
	}
	return false
}

// isPlaceholder reports passwords that are clearly not real: already masked
// (****), or a template variable ($PASS, ${PASS}, <password>).
func isPlaceholder(pw string) bool {
	return strings.Trim(pw, "*") == "" || pw[0] == '$' || (pw[0] == '<' && pw[len(pw)-1] == '>') ||
		(strings.HasPrefix(pw, "{{") && strings.HasSuffix(pw, "}}"))
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool  { return isLetter(c) || isDigit(c) }

func hasDigitAndLetter(s string) bool {
	var d, l bool
	for i := 0; i < len(s) && !(d && l); i++ {
		d = d || isDigit(s[i])
		l = l || isLetter(s[i])
	}
	return d && l
}

// lazyRE is a regular expression compiled when it is first used: a
// program that links this package (the CLI, for its launch receipts) and
// never masks anything pays nothing for it at start.
type lazyRE struct {
	src string
	re  func() *regexp.Regexp
}

func lazy(src string) *lazyRE {
	return &lazyRE{src: src, re: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(src) })}
}

func (l *lazyRE) get() *regexp.Regexp { return l.re() }
