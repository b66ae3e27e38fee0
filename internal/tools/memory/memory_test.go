package memory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func openTemp(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "memory", "agent.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func mustUpdate(t testing.TB, s *Store, key, content string, tags []string, mode Mode) *Entry {
	t.Helper()
	e, err := s.Update(context.Background(), key, content, tags, mode)
	if err != nil {
		t.Fatalf("Update(%q, %s): %v", key, mode, err)
	}
	return e
}

func keys(hits []Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Key)
	}
	return out
}

func TestOpenPermissions(t *testing.T) {
	t.Parallel()
	_, path := openTemp(t)
	for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	put := mustUpdate(t, s, "project/deploy", "Deploy with `make release`.", []string{"ops", "ops", " howto "}, "")
	got, err := s.Get(ctx, "project/deploy")
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != put.Content || !slices.Equal(got.Tags, []string{"ops", "howto"}) {
		t.Errorf("Get = %+v, want content %q tags [ops howto]", got, put.Content)
	}
	if !got.Created.Equal(put.Created) || !got.Updated.Equal(put.Updated) || got.Created.IsZero() {
		t.Errorf("times: got %v/%v, put %v/%v", got.Created, got.Updated, put.Created, put.Updated)
	}

	// Replace keeps Created and, with nil tags, the tags.
	e := mustUpdate(t, s, "project/deploy", "Deploy with `make ship`.", nil, ModeReplace)
	if e.Content != "Deploy with `make ship`." || !slices.Equal(e.Tags, []string{"ops", "howto"}) || !e.Created.Equal(put.Created) {
		t.Errorf("after replace: %+v", e)
	}
	e = mustUpdate(t, s, "project/deploy", "x", []string{}, ModeReplace)
	if len(e.Tags) != 0 {
		t.Errorf("empty non-nil tags should clear, got %q", e.Tags)
	}

	list, err := s.List(ctx, "", 0)
	if err != nil || len(list) != 1 || list[0].Key != "project/deploy" {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestGetMissing(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	_, err := s.Get(context.Background(), "nope")
	if !errors.Is(err, ErrNotFound) || !IsNotFound(err) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	for _, want := range []string{`"nope"`, "memory_search"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestAppend(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	mustUpdate(t, s, "log", "first\n", []string{"a"}, ModeAppend) // creates
	e := mustUpdate(t, s, "log", "second", []string{"b", "a"}, ModeAppend)
	if e.Content != "first\n\nsecond" {
		t.Errorf("content = %q", e.Content)
	}
	if !slices.Equal(e.Tags, []string{"a", "b"}) {
		t.Errorf("tags = %q", e.Tags)
	}
	// Appending past the size limit names the field and changes nothing.
	big := strings.Repeat("x", MaxContentBytes-10)
	_, err := s.Update(context.Background(), "log", big, nil, ModeAppend)
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != "content" {
		t.Fatalf("err = %v, want invalid content", err)
	}
	got, _ := s.Get(context.Background(), "log")
	if got.Content != "first\n\nsecond" {
		t.Errorf("failed append changed content to %.40q", got.Content)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	mustUpdate(t, s, "gone", "soon forgotten pelican", nil, "")
	e := mustUpdate(t, s, "gone", "", nil, ModeDelete)
	if e.Content != "soon forgotten pelican" {
		t.Errorf("delete returned %+v, want the old note", e)
	}
	if _, err := s.Get(ctx, "gone"); !IsNotFound(err) {
		t.Errorf("Get after delete: %v", err)
	}
	if hits, err := s.Search(ctx, "pelican", 0); err != nil || len(hits) != 0 {
		t.Errorf("index still has deleted note: %v %v", hits, err)
	}
	if _, err := s.Update(ctx, "gone", "", nil, ModeDelete); !IsNotFound(err) {
		t.Errorf("deleting twice: %v, want ErrNotFound", err)
	}
}

func TestSearchRanking(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	mustUpdate(t, s, "notes/misc", "We talked about kubernetes once, among many other unrelated things in the weekly sync.", nil, "")
	mustUpdate(t, s, "kubernetes", "Cluster access details.", nil, "")
	mustUpdate(t, s, "unrelated", "Nothing to see here.", nil, "")
	hits, err := s.Search(ctx, "kubernetes", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(hits); !slices.Equal(got, []string{"kubernetes", "notes/misc"}) {
		t.Fatalf("order = %q, want key match first", got)
	}
	if hits[0].Score <= hits[1].Score {
		t.Errorf("scores %v, %v: want higher for better", hits[0].Score, hits[1].Score)
	}
	if sn := hits[1].Snippet; !strings.Contains(sn, "[kubernetes]") {
		t.Errorf("snippet %q does not mark the match", sn)
	}
	if sn := hits[0].Snippet; sn == "" {
		t.Errorf("key-only match has an empty snippet")
	}
	// Stemming: "deploying" finds "deployed".
	mustUpdate(t, s, "rollout", "The service was deployed on Friday.", []string{"ops"}, "")
	hits, _ = s.Search(ctx, "deploying", 0)
	if got := keys(hits); !slices.Equal(got, []string{"rollout"}) {
		t.Errorf("stemmed search = %q", got)
	}
	// Tags are searchable and returned.
	hits, _ = s.Search(ctx, "ops", 0)
	if len(hits) != 1 || !slices.Equal(hits[0].Tags, []string{"ops"}) {
		t.Errorf("tag search = %+v", hits)
	}
}

func TestSnippetElides(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	long := strings.Repeat("filler words go here and there ", 40) + "the albatross appears" + strings.Repeat(" more filler text", 40)
	mustUpdate(t, s, "long", long, nil, "")
	hits, err := s.Search(context.Background(), "albatross", 0)
	if err != nil || len(hits) != 1 {
		t.Fatalf("%v %v", hits, err)
	}
	if sn := hits[0].Snippet; !strings.Contains(sn, "[albatross]") || !strings.Contains(sn, "…") || len(sn) > 400 {
		t.Errorf("snippet = %q", sn)
	}
}

func TestSearchHostileQueries(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	mustUpdate(t, s, "misc", `He said "hello" AND left; see NEAR(x y) and col:val * ^start — café naïve 日本語 emoji 🎉`, nil, "")
	queries := []string{
		`"`, `""`, `"hello`, `hello"`, `AND`, `OR`, `NOT`, `hello AND`, `AND hello`, `NEAR(`, `NEAR(x y)`, `NEAR(x, 2)`,
		`*`, `**`, `hello*`, `*hello`, `he*llo`, `(`, `)`, `()`, `{}`, `[x]`, `col:val`, `key:misc`, `-x`, `+x`, `^start`,
		`'`, `\`, `;`, `-- drop table`, `'); DROP TABLE entries; --`, `café`, `cafe`, `日本語`, `🎉`, `naïve*`,
		"tab\there", "\x00", "a\u200bb", `OR OR OR`, `"a" "b"`, `x:`, `:`, `.`, `hello.`, `hello,world`,
		strings.Repeat("word ", 200), strings.Repeat(`"`, 1000),
	}
	for _, q := range queries {
		if _, err := s.Search(ctx, q, 5); err != nil {
			t.Errorf("Search(%q): %v", q, err)
		}
	}
	// Operators are words: NEAR( finds the note containing "near", AND finds "and".
	for _, q := range []string{`NEAR(x`, `"hello`, `AND`, `café`, `日本語`} {
		if hits, _ := s.Search(ctx, q, 5); len(hits) != 1 {
			t.Errorf("Search(%q) = %d hits, want 1", q, len(hits))
		}
	}
}

func TestSearchEmptyQuery(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	for _, q := range []string{"", "   ", "\n\t"} {
		_, err := s.Search(context.Background(), q, 0)
		if err == nil || err.Error() != "query is empty" || !IsInvalid(err) {
			t.Errorf("Search(%q) err = %v, want \"query is empty\"", q, err)
		}
	}
}

func TestSearchORFallback(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	mustUpdate(t, s, "a", "postgres connection string lives in vault", nil, "")
	mustUpdate(t, s, "b", "redis runs on port 6379", nil, "")
	mustUpdate(t, s, "c", "postgres and redis both run in docker", nil, "")
	// AND first: only c has both.
	hits, _ := s.Search(ctx, "postgres redis", 0)
	if got := keys(hits); !slices.Equal(got, []string{"c"}) {
		t.Errorf("AND = %q, want [c]", got)
	}
	// No note has all three words: fall back to OR.
	hits, _ = s.Search(ctx, "postgres redis mongodb", 0)
	if got := keys(hits); len(got) != 3 {
		t.Errorf("OR fallback = %q, want all three", got)
	}
	hits, _ = s.Search(ctx, "mongodb cassandra", 0)
	if len(hits) != 0 {
		t.Errorf("no match = %q", keys(hits))
	}
}

func TestSearchPrefix(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	mustUpdate(t, s, "k8s", "kubectl rollout status", nil, "")
	mustUpdate(t, s, "other", "cube root", nil, "")
	hits, _ := s.Search(ctx, "kubect*", 0)
	if got := keys(hits); !slices.Equal(got, []string{"k8s"}) {
		t.Errorf("prefix = %q", got)
	}
	if hits, _ = s.Search(ctx, "kubect", 0); len(hits) != 0 {
		t.Errorf("without * a partial word should not match: %q", keys(hits))
	}
}

func TestTwoHandles(t *testing.T) {
	t.Parallel()
	a, path := openTemp(t)
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	mustUpdate(t, a, "shared", "written by a", nil, "")
	if e, err := b.Get(ctx, "shared"); err != nil || e.Content != "written by a" {
		t.Fatalf("b.Get = %+v, %v", e, err)
	}
	if hits, err := b.Search(ctx, "written", 0); err != nil || len(hits) != 1 {
		t.Fatalf("b.Search = %v, %v", hits, err)
	}
	// Concurrent writers through both handles all land.
	errs := make(chan error, 40)
	for i := range 40 {
		st := a
		if i%2 == 1 {
			st = b
		}
		go func() {
			_, err := st.Update(ctx, "counter", fmt.Sprintf("line %d", i), nil, ModeAppend)
			errs <- err
		}()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	e, err := a.Get(ctx, "counter")
	if err != nil || strings.Count(e.Content, "line ") != 40 {
		t.Errorf("after concurrent appends: %v %q", err, e)
	}
}

func TestPersistence(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dir with space?and#odd", "agent.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, "keep", "remember the milk", []string{"todo"}, "")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the path given: %v", err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := s.Get(context.Background(), "keep")
	if err != nil || e.Content != "remember the milk" || !slices.Equal(e.Tags, []string{"todo"}) {
		t.Fatalf("after reopen: %+v %v", e, err)
	}
	if hits, _ := s.Search(context.Background(), "milk", 0); len(hits) != 1 {
		t.Errorf("index lost across reopen")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	if _, err := s.db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a newer schema: %v", err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	for _, k := range []string{"proj/b", "proj/a", "proj%x", "other", "proj_"} {
		mustUpdate(t, s, k, "c", nil, "")
	}
	l, err := s.List(context.Background(), "proj/", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l {
		got = append(got, e.Key)
	}
	if !slices.Equal(got, []string{"proj/a", "proj/b"}) {
		t.Errorf("List(proj/) = %q", got)
	}
	if l, _ := s.List(context.Background(), "", 2); len(l) != 2 {
		t.Errorf("limit ignored: %d", len(l))
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := context.Background()
	manyTags := make([]string, MaxTags+1)
	for i := range manyTags {
		manyTags[i] = fmt.Sprint("t", i)
	}
	cases := []struct {
		name, key, content string
		tags               []string
		mode               Mode
		field              string
	}{
		{"empty key", "", "c", nil, "", "key"},
		{"long key", strings.Repeat("k", MaxKeyChars+1), "c", nil, "", "key"},
		{"newline in key", "a\nb", "c", nil, "", "key"},
		{"nul in key", "a\x00b", "c", nil, "", "key"},
		{"empty content", "k", " ", nil, "", "content"},
		{"huge content", "k", strings.Repeat("x", MaxContentBytes+1), nil, "", "content"},
		{"too many tags", "k", "c", manyTags, "", "tags"},
		{"long tag", "k", "c", []string{strings.Repeat("t", MaxTagChars+1)}, "", "tags"},
		{"empty tag", "k", "c", []string{""}, "", "tags"},
		{"bad mode", "k", "c", nil, "upsert", "mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Update(ctx, tc.key, tc.content, tc.tags, tc.mode)
			var ie *InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field || !IsInvalid(err) {
				t.Fatalf("err = %v, want invalid %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
	// Boundaries are allowed.
	mustUpdate(t, s, strings.Repeat("é", MaxKeyChars), strings.Repeat("x", MaxContentBytes), manyTags[:MaxTags], "")
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeReplace, "replace": ModeReplace, "Append": ModeAppend, " delete ": ModeDelete} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if Mode("").String() != "replace" {
		t.Errorf("zero Mode prints %q", Mode("").String())
	}
}

func TestBuildQueries(t *testing.T) {
	for _, tc := range []struct{ in, all, any string }{
		{`foo bar`, `"foo" AND "bar"`, `"foo" OR "bar"`},
		{`e-mail`, `"e mail"`, `"e mail"`},
		{`dep* NEAR(x`, `"dep"* AND "NEAR x"`, `"dep"* OR "NEAR x"`},
		{`"quoted"`, `"quoted"`, `"quoted"`},
		{`!!! *`, ``, ``},
		{`a a`, `"a"`, `"a"`},
	} {
		all, anyTerm := buildQueries(tc.in)
		if all != tc.all || anyTerm != tc.any {
			t.Errorf("buildQueries(%q) = %q, %q; want %q, %q", tc.in, all, anyTerm, tc.all, tc.any)
		}
	}
}

func TestContextCanceled(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Update(ctx, "k", "c", nil, ""); err == nil {
		t.Error("Update with a canceled context succeeded")
	}
	if _, err := s.Search(ctx, "c", 0); err == nil {
		t.Error("Search with a canceled context succeeded")
	}
}

func BenchmarkSearch(b *testing.B) {
	s, _ := openTemp(b)
	ctx := context.Background()
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega deploy build test cluster node pod service ingress secret volume")
	tx, err := s.db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		var sb strings.Builder
		for j := range 40 {
			sb.WriteString(words[(i*7+j*13+j*j)%len(words)])
			sb.WriteByte(' ')
		}
		if _, err := tx.Exec(`INSERT INTO entries (key, content, tags, created, updated) VALUES (?, ?, ?, 0, 0)`,
			fmt.Sprintf("note/%05d/%s", i, words[i%len(words)]), sb.String(), words[i%7]); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{"cluster ingress", "omega", "depl*", "nothing matches this fallback"} {
		b.Run(strings.ReplaceAll(q, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Search(ctx, q, 10); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
