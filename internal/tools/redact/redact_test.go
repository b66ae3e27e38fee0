package redact

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// Fake credentials, assembled so that this file itself holds none in a form
// a secret scanner would flag.
var (
	ghToken    = "gh" + "p_" + "R4nd0mT0kenValue1234567890abcdefABCD"     // 36 after ghp_
	awsKeyID   = "AKIA" + "Q3EGHJ7KXMPL2ZN4"                              // 16 after AKIA
	awsSecret  = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"          // 40
	googleKey  = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"           // 35 after AIza
	openaiKey  = "sk-" + "proj-" + "Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789" // sk-proj-…
	anthKey    = "sk-" + "ant-" + "api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fEdCbA_-xx"
	stripeKey  = "sk_" + "live_" + "51H8aBcDeFgHiJkLmNoPqRsTuVwXyZ"
	slackToken = "xox" + "b-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	gitlabTok  = "gl" + "pat-" + "xYz12AbC34dEf56GhI78"
	fineGrain  = "github" + "_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab"
	jwt        = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ" + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	pemKey     = "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq4n8Jp\nQ2x9vR3mT0sL+aW/eZ\n-----END RSA PRIVATE KEY-----"
)

func TestPatterns(t *testing.T) {
	t.Parallel()
	r := New()
	cases := []struct {
		name, in, want string
	}{
		{"aws key id", "id=" + awsKeyID + "\n", "id=[REDACTED:aws_access_key_id]\n"},
		{"aws key id ASIA", "ASIA" + "Q3EGHJ7KXMPL2ZN4 x", "[REDACTED:aws_access_key_id] x"},
		{"aws key id too long", awsKeyID + "X", awsKeyID + "X"},
		{"aws key id too short", awsKeyID[:19], awsKeyID[:19]},
		{"aws key id inside word", "XAKIA" + "Q3EGHJ7KXMPL2ZN4", "XAKIA" + "Q3EGHJ7KXMPL2ZN4"},
		{"aws secret ini", "aws_secret_access_key = " + awsSecret + "\n", "aws_secret_access_key = [REDACTED:aws_secret_access_key]\n"},
		{"aws secret env", "AWS_SECRET_ACCESS_KEY=" + awsSecret, "AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]"},
		{"aws secret json", `"SecretAccessKey": "` + awsSecret + `",`, `"SecretAccessKey": "[REDACTED:aws_secret_access_key]",`},
		{"aws secret unlabelled", "value " + awsSecret, "value " + awsSecret},
		{"aws secret label, short value", "aws_secret_access_key = tooShort", "aws_secret_access_key = tooShort"},
		{"github classic", "token " + ghToken + ".", "token [REDACTED:github_token]."},
		{"github short", "ghp_" + "abc123", "ghp_" + "abc123"},
		{"github fine-grained", "GH=" + fineGrain, "GH=[REDACTED:github_token]"},
		{"github fine-grained short", "github_pat_" + "short", "github_pat_" + "short"},
		{"gitlab", "PRIVATE-TOKEN: " + gitlabTok, "PRIVATE-TOKEN: [REDACTED:gitlab_token]"},
		{"gitlab short", "glpat-" + "abc", "glpat-" + "abc"},
		{"slack", "SLACK=" + slackToken, "SLACK=[REDACTED:slack_token]"},
		{"slack word", "xoxb-" + "documentation", "xoxb-" + "documentation"},
		{"openai", "OPENAI_API_KEY=" + openaiKey, "OPENAI_API_KEY=[REDACTED:openai_api_key]"},
		{"openai legacy", "key: sk-" + "T3BlbkFJabcdefghij0123456789", "key: [REDACTED:openai_api_key]"},
		{"openai near miss: task-", "task-" + "management0123456789abcdef", "task-" + "management0123456789abcdef"},
		{"openai near miss: words", "sk-" + "some-long-hyphenated-name", "sk-" + "some-long-hyphenated-name"},
		{"anthropic", "x-api-key: " + anthKey, "x-api-key: [REDACTED:anthropic_api_key]"},
		{"anthropic short", "sk-ant-" + "abc", "sk-ant-" + "abc"},
		{"google", "key=" + googleKey + "&q=1", "key=[REDACTED:google_api_key]&q=1"},
		{"google short", googleKey[:30], googleKey[:30]},
		{"stripe", "STRIPE=" + stripeKey, "STRIPE=[REDACTED:stripe_key]"},
		{"stripe restricted", "rk_" + "live_" + "51H8aBcDeFgHiJkLmNoPqRsTu", "[REDACTED:stripe_key]"},
		{"stripe publishable", "pk_" + "live_" + "51H8aBcDeFgHiJkLmNoPqRsTu", "pk_" + "live_" + "51H8aBcDeFgHiJkLmNoPqRsTu"},
		{"private key", "key:\n" + pemKey + "\ndone", "key:\n[REDACTED:private_key]\ndone"},
		{"private key truncated", "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "[REDACTED:private_key]"},
		{"public key", "-----BEGIN " + "PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----", "-----BEGIN " + "PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----"},
		{"jwt", "token=" + jwt + " ok", "token=[REDACTED:jwt] ok"},
		{"jwt near miss", "eyJ" + "hello.eyJworld", "eyJ" + "hello.eyJworld"},
		{"bearer", "Authorization: Bearer abc.DEF-123_xyz~+/=", "Authorization: Bearer [REDACTED:authorization]"},
		{"bearer lowercase json", `"authorization": "bearer 0123456789abcdef"`, `"authorization": "bearer [REDACTED:authorization]"`},
		{"basic", "AUTHORIZATION: Basic dXNlcjpwYXNzd29yZA==", "AUTHORIZATION: Basic [REDACTED:authorization]"},
		{"bearer placeholder", "Authorization: Bearer $TOKEN", "Authorization: Bearer $TOKEN"},
		{"bearer without header", "Bearer tokens are described in RFC 6750", "Bearer tokens are described in RFC 6750"},
		{"url password", "postgres://app:s3cr3t-pw@db:5432/x", "postgres://app:[REDACTED:url_password]@db:5432/x"},
		{"url password with @", "https://u:p@ss@host/", "https://u:[REDACTED:url_password]@host/"},
		{"url no password", "https://user@host/x https://host:8080/a@b", "https://user@host/x https://host:8080/a@b"},
		{"url placeholder", "redis://:${REDIS_PASSWORD}@redis:6379 mysql://root:****@h", "redis://:${REDIS_PASSWORD}@redis:6379 mysql://root:****@h"},
		{"url email in query", "https://example.com/?to=a@b.c", "https://example.com/?to=a@b.c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q)\n got  %q\n want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestAddSecret(t *testing.T) {
	t.Parallel()
	r := New()
	if err := r.AddSecret("DB_PASS", "short"); err == nil || !strings.Contains(err.Error(), "shorter than 8") {
		t.Errorf("short value: %v", err)
	} else if strings.Contains(err.Error(), "short\"") {
		t.Errorf("error leaks the value: %v", err)
	}
	for _, name := range []string{"", "has space", "x]y", strings.Repeat("n", 65)} {
		if err := r.AddSecret(name, "longenoughvalue"); err == nil {
			t.Errorf("AddSecret(%q) accepted", name)
		}
	}
	const pw = `p@ss "w<rd"/42`
	if err := r.AddSecret("DB_PASS", pw); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, in string }{
		{"plain", "password is " + pw + "!"},
		{"json", `{"password":"p@ss \"w\u003crd\"/42"}`},
		{"json no html escape", `{"password":"p@ss \"w<rd\"/42"}`},
		{"query", "https://h/?pw=p%40ss+%22w%3Crd%22%2F42&x=1"},
		{"path", "https://h/" + url.PathEscape(pw) + "/x"},
		{"base64", "data: " + base64.StdEncoding.EncodeToString([]byte(pw))},
	} {
		got := r.Redact(tc.in)
		if !strings.Contains(got, "[REDACTED:DB_PASS]") {
			t.Errorf("%s: %q not masked: %q", tc.name, tc.in, got)
		}
	}
}

func TestOverlappingSecrets(t *testing.T) {
	t.Parallel()
	r := New()
	must(t, r.AddSecret("A", "abcdefgh12"))
	must(t, r.AddSecret("B", "gh12345678"))
	must(t, r.AddSecret("LONG", "abcdefgh12-and-more"))
	cases := []struct{ in, want string }{
		// A and B overlap: one mask, no fragment of B left over.
		{"x abcdefgh12345678 y", "x [REDACTED:A] y"},
		// At the same start the longer value names the mask.
		{"abcdefgh12-and-more", "[REDACTED:LONG]"},
		// Adjacent, not overlapping: two masks.
		{"abcdefgh12gh12345678", "[REDACTED:A][REDACTED:B]"},
		// A value overlapping itself.
		{"abcdefgh12", "[REDACTED:A]"},
	}
	for _, tc := range cases {
		if got := r.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	r2 := New()
	must(t, r2.AddSecret("AAA", "aaaaaaaa"))
	if got := r2.Redact("xaaaaaaaaaaax"); got != "x[REDACTED:AAA]x" {
		t.Errorf("self-overlap: %q", got)
	}
	// A registered value overlapping a pattern match: merged, named for the
	// registered value.
	must(t, r.AddSecret("PART", awsKeyID[10:]+"-tail"))
	if got := r.Redact(awsKeyID + "-tail"); got != "[REDACTED:PART]" {
		t.Errorf("value/pattern overlap: %q", got)
	}
}

func TestRegisteredBeatsPattern(t *testing.T) {
	t.Parallel()
	r := New()
	must(t, r.AddSecret("GITHUB_TOKEN", ghToken))
	got, n := r.RedactCount("push with " + ghToken + " and " + awsKeyID)
	if want := "push with [REDACTED:GITHUB_TOKEN] and [REDACTED:aws_access_key_id]"; got != want || n != 2 {
		t.Errorf("got %q, %d; want %q, 2", got, n, want)
	}
	if r.Count() != 2 {
		t.Errorf("Count = %d", r.Count())
	}
}

func TestCleanOutputUnchanged(t *testing.T) {
	t.Parallel()
	r := New()
	must(t, r.AddSecret("TOKEN", "not-in-this-text-0000"))
	in := ordinaryText(30000)
	out, n := r.RedactCount(in)
	if out != in || n != 0 {
		t.Fatalf("clean text changed (%d masks)", n)
	}
	if unsafe.StringData(out) != unsafe.StringData(in) {
		t.Errorf("clean text was copied")
	}
	b := []byte(in)
	if got := r.RedactBytes(b); !bytes.Equal(got, b) || &got[0] != &b[0] {
		t.Errorf("RedactBytes copied or changed clean input")
	}
	if got := r.RedactBytes(nil); got != nil {
		t.Errorf("RedactBytes(nil) = %q", got)
	}
	if got := r.RedactBytes([]byte("k " + awsKeyID)); string(got) != "k [REDACTED:aws_access_key_id]" {
		t.Errorf("RedactBytes = %q", got)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	r := New()
	in := ordinaryText(2000) + " " + ghToken + " secret-value-7 secret-value-3"
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if g == 0 && i < 10 {
					must(t, r.AddSecret(fmt.Sprint("S", i), fmt.Sprint("secret-value-", i)))
				}
				out := r.Redact(in)
				if strings.Contains(out, ghToken) {
					t.Error("token leaked")
					return
				}
			}
		})
	}
	wg.Wait()
	if out := r.Redact(in); !strings.Contains(out, "[REDACTED:S7] [REDACTED:S3]") {
		t.Errorf("after concurrent adds: %q", out[len(out)-80:])
	}
}

func TestPatternTable(t *testing.T) {
	t.Parallel()
	if len(patterns) > maxPatterns {
		t.Fatalf("%d patterns; raise maxPatterns", len(patterns))
	}
	for _, p := range patterns {
		if (p.re == nil) == (p.at == nil) {
			t.Errorf("%s: exactly one of re and at must be set", p.kind)
		}
		if p.re != nil && !strings.HasPrefix(strings.TrimPrefix(p.re.src, "(?i)"), "^") {
			t.Errorf("%s: regexp %s is not anchored", p.kind, p.re.src)
		}
		if p.re != nil {
			p.re.get() // every one compiles
		}
	}
	if a := pivot("AUTHORIZATION"); a != 7 {
		t.Errorf("pivot(AUTHORIZATION) = %d, want the Z", a)
	}
	// Case-insensitive anchors match in any case.
	r := New()
	for _, h := range []string{"AuThOrIzAtIoN: bearer 0123456789", "x-authorization: Token 0123456789"} {
		if got := r.Redact(h); !strings.HasSuffix(got, "[REDACTED:authorization]") {
			t.Errorf("Redact(%q) = %q", h, got)
		}
	}
}

func TestPathological(t *testing.T) {
	t.Parallel()
	r := New()
	// Many near-miss candidates must not go quadratic; this finishes at
	// once or the test times out.
	in := "x" + strings.Repeat("sk-", 20000) + strings.Repeat("://a:b", 5000) + strings.Repeat("eyJ", 10000)
	_ = r.Redact(in)
	in = "authorization: " + strings.Repeat("Bearer ", 5000)
	_ = r.Redact(in)
	in = strings.Repeat("-----BEGIN RSA PRIVATE KEY-----!", 3000)
	_ = r.Redact(in)
	in = strings.Repeat("authorization:", 5000)
	_ = r.Redact(in)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ordinaryText is build-log-like output: words, paths, URLs, hashes,
// numbers, JSON — everything but credentials.
func ordinaryText(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields(`the build completed successfully in seconds with warnings error failed test pass
		ok go vet compiling package internal/tools/memory github.com/nsys-cortex/cortex task-runner disk-cache
		risk-free sk-learn https://example.com/docs?page=2 user@example.com {"status":"ok","count":42}
		sha256:9f86d081884c7d659a2feaa0c55ad015 /usr/local/bin/go --flag=value Authorization header skipped
		2026-01-02T15:04:05Z 127.0.0.1:8080 PASS FAIL --- === RUN TestSomething (0.01s) AKIA is a prefix
		ghp_ prefix tokens are documented eyJ is base64 for {" -----BEGIN PUBLIC KEY----- postgres://db/app`)
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(12) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}

// BenchmarkRedact30k masks nothing: "prose" has none of the patterns'
// anchors, "log" is full of near misses (sk-learn, ghp_, AKIA, eyJ, URLs,
// Authorization) that make the regexps run.
func BenchmarkRedact30k(b *testing.B) {
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog; build ok in 12.5s (cached).\n", 500)[:30000]
	for _, tc := range []struct {
		name    string
		in      string
		secrets int
	}{{"prose", prose, 0}, {"log", ordinaryText(30000), 0}, {"log+10secrets", ordinaryText(30000), 10}} {
		in, secrets := tc.in, tc.secrets
		r := New()
		for i := range secrets {
			if err := r.AddSecret(fmt.Sprint("S", i), fmt.Sprintf("registered-secret-%02d-value", i)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if out := r.Redact(in); len(out) != len(in) {
					b.Fatal("clean text changed")
				}
			}
		})
	}
}

// A hashing redactor's masks say which value they hide, by a hash
// prefix, and never the value.
func TestNewHashing(t *testing.T) {
	r := NewHashing()
	if err := r.AddSecret("KEY", "value-0123456789"); err != nil {
		t.Fatal(err)
	}
	got := r.Redact("--key=value-0123456789 and again value-0123456789")
	// sha256("value-0123456789") begins d2aa16a0 (printf ... | sha256sum).
	want := "--key=[REDACTED:KEY sha256:d2aa16a0] and again [REDACTED:KEY sha256:d2aa16a0]"
	if got != want || strings.Contains(got, "0123456789]") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if plain := New(); plain.Redact("x") != "x" {
		t.Fatal("a plain redactor changed clean text")
	}
}
