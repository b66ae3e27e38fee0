package memory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Entry is one note.
type Entry struct {
	Key     string
	Content string
	Tags    []string
	Created time.Time
	Updated time.Time
}

// Hit is one search result. Snippet is an excerpt of the note's content with
// matched words marked [like this] and elisions shown as …. Score is higher
// for better matches; it is only comparable within one Search call.
type Hit struct {
	Key     string
	Snippet string
	Tags    []string
	Score   float64
	Updated time.Time
}

// Store is one agent's notes in one SQLite file. It is safe for concurrent
// use, and other processes may have the same file open.
type Store struct {
	db   *sql.DB
	path string
	now  func() time.Time
}

// busyTimeout is how long a statement waits for another connection or process
// holding the write lock before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Open opens the notes file at path, creating it (and its directory, 0700)
// with mode 0600 if needed, and brings its schema up to date.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("memory: open: path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("memory: open %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("memory: open %s: create directory: %w", abs, err)
	}
	// Create the file ourselves so it is 0600 from the start; SQLite gives
	// the -wal and -shm files the database file's permissions.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("memory: open %s: %w", abs, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("memory: open %s: %w", abs, err)
	}
	db, err := sql.Open("sqlite", dsn(abs))
	if err != nil {
		return nil, fmt.Errorf("memory: open %s: %w", abs, err)
	}
	s := &Store{db: db, path: abs, now: time.Now}
	if err := s.migrate(context.Background()); err != nil {
		db.Close() // the migrate error is the one worth reporting
		return nil, fmt.Errorf("memory: open %s: %w", abs, err)
	}
	return s, nil
}

// dsn builds a file: URI (so any character in the path is escaped rather
// than read as a parameter) with the pragmas every connection needs.
func dsn(abs string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()
}

// Close closes the store. Notes already written stay in the file.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("memory: close %s: %w", s.path, err)
	}
	return nil
}

// Get returns the note stored under key. A missing note is an error that
// satisfies errors.Is(err, ErrNotFound).
func (s *Store) Get(ctx context.Context, key string) (*Entry, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	e, err := getEntry(ctx, s.db, key)
	if err != nil {
		return nil, s.wrap("get", err)
	}
	return e, nil
}

// Update writes the note under key according to mode:
//
//   - ModeReplace (or ""): content replaces the note's content, creating the
//     note if it does not exist.
//   - ModeAppend: content is added as a new paragraph after the existing
//     content, creating the note if it does not exist. Tags are merged.
//   - ModeDelete: the note is removed; content and tags are ignored. A
//     missing note is ErrNotFound. The returned Entry is the note as it was.
//
// For replace and append, nil tags keep the note's existing tags; in replace
// mode a non-nil empty slice clears them.
func (s *Store) Update(ctx context.Context, key, content string, tags []string, mode Mode) (*Entry, error) {
	mode, err := ParseMode(string(mode))
	if err != nil {
		return nil, err
	}
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if mode != ModeDelete {
		if err := validateContent(content); err != nil {
			return nil, err
		}
		if tags, err = normalizeTags(tags); err != nil {
			return nil, err
		}
	}
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE, see dsn
	if err != nil {
		return nil, s.wrap("update", err)
	}
	defer tx.Rollback() // no-op after Commit; an earlier error is already being returned
	old, err := getEntry(ctx, tx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, s.wrap("update", err)
	}
	var e *Entry
	switch mode {
	case ModeDelete:
		if old == nil {
			return nil, err // ErrNotFound, naming the key
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM entries WHERE key = ?`, key); err != nil {
			return nil, s.wrap("delete", err)
		}
		e = old
	default:
		e = s.merge(old, key, content, tags, mode)
		if len(e.Tags) > MaxTags {
			return nil, invalid("tags", fmt.Sprintf("appending would give the note %d tags; the limit is %d", len(e.Tags), MaxTags))
		}
		if len(e.Content) > MaxContentBytes {
			return nil, invalid("content", fmt.Sprintf("appending would make the note %d bytes; the limit is %d (1 MiB) — "+
				"replace it with a shorter version or start a new key", len(e.Content), MaxContentBytes))
		}
		if err := putEntry(ctx, tx, e, old != nil); err != nil {
			return nil, s.wrap("update", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, s.wrap("update", err)
	}
	return e, nil
}

// merge computes the note that an update produces.
func (s *Store) merge(old *Entry, key, content string, tags []string, mode Mode) *Entry {
	now := s.now().UTC().Truncate(time.Millisecond)
	if old == nil {
		if tags == nil {
			tags = []string{}
		}
		return &Entry{Key: key, Content: content, Tags: tags, Created: now, Updated: now}
	}
	e := *old
	e.Updated = now
	switch mode {
	case ModeAppend:
		e.Content = strings.TrimRight(old.Content, "\n") + "\n\n" + content
		for _, t := range tags {
			if !slices.Contains(e.Tags, t) {
				e.Tags = append(e.Tags, t)
			}
		}
	default:
		e.Content = content
		if tags != nil {
			e.Tags = tags
		}
	}
	return &e
}

// List returns up to limit notes whose keys start with prefix, in key order.
// An empty prefix lists every note. limit <= 0 means DefaultListLimit.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]Entry, error) {
	if strings.ContainsFunc(prefix, isControl) {
		return nil, invalid("prefix", "contains a control character")
	}
	limit = clampLimit(limit, DefaultListLimit, MaxListLimit)
	rows, err := s.db.QueryContext(ctx, `
		SELECT key, content, tags, created, updated FROM entries
		WHERE substr(key, 1, length(?1)) = ?1
		ORDER BY key LIMIT ?2`, prefix, limit)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, s.wrap("list", err)
		}
		out = append(out, *e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("list", err)
	}
	return out, nil
}

// Search returns up to limit notes matching query, best first. limit <= 0
// means DefaultSearchLimit. See package doc and buildQueries for how query is
// read: every word must match, unless that finds nothing, in which case any
// word may; a word ending in * matches as a prefix.
func (s *Store) Search(ctx context.Context, query string, limit int) ([]Hit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, invalid("query", "query is empty")
	}
	limit = clampLimit(limit, DefaultSearchLimit, MaxSearchLimit)
	all, anyTerm := buildQueries(query)
	if all == "" {
		return nil, nil // only punctuation: nothing a word index can find
	}
	hits, err := s.search(ctx, all, limit)
	if err == nil && len(hits) == 0 && anyTerm != all {
		hits, err = s.search(ctx, anyTerm, limit)
	}
	if err != nil {
		return nil, s.wrap("search", err)
	}
	return hits, nil
}

// searchSQL ranks with bm25 weighted by column, in table order (key,
// content, tags): a word in the key says far more about a note than the same
// word in its body. Ranking through FTS5's rank column with ORDER BY rank
// LIMIT inside the subquery lets FTS5 sort the matches itself and compute
// snippet() only for the rows returned, not for every match.
const searchSQL = `
	SELECT e.key, f.snip, e.tags, f.rank, e.updated
	FROM (
		SELECT rowid, snippet(entries_fts, 1, '[', ']', '…', 24) AS snip, rank
		FROM entries_fts
		WHERE entries_fts MATCH ? AND rank MATCH 'bm25(10.0, 1.0, 4.0)'
		ORDER BY rank LIMIT ?
	) f JOIN entries e ON e.id = f.rowid
	ORDER BY f.rank, e.updated DESC`

func (s *Store) search(ctx context.Context, match string, limit int) ([]Hit, error) {
	rows, err := s.db.QueryContext(ctx, searchSQL, match, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hits []Hit
	for rows.Next() {
		var h Hit
		var tags string
		var updated int64
		if err := rows.Scan(&h.Key, &h.Snippet, &tags, &h.Score, &updated); err != nil {
			return nil, err
		}
		h.Score = -h.Score // bm25 is lower-is-better; Hit.Score is higher-is-better
		h.Tags = splitTags(tags)
		h.Updated = time.UnixMilli(updated).UTC()
		hits = append(hits, h)
	}
	return hits, rows.Err()
}

func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("memory: %s in %s: %w", op, s.path, err)
}

func clampLimit(n, def, max int) int {
	if n <= 0 {
		return def
	}
	return min(n, max)
}
