package memory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// migrations[i] takes the schema from user_version i to i+1. Append only;
// never edit a step that has shipped.
var migrations = []string{
	// 1: notes plus an external-content FTS5 index kept in step by triggers.
	// tags is the tag list joined by newlines (tags cannot contain control
	// characters); unicode61 splits on the newline, so each tag is indexed.
	`CREATE TABLE entries (
		id      INTEGER PRIMARY KEY,
		key     TEXT NOT NULL UNIQUE,
		content TEXT NOT NULL,
		tags    TEXT NOT NULL DEFAULT '',
		created INTEGER NOT NULL, -- unix milliseconds
		updated INTEGER NOT NULL  -- unix milliseconds
	);
	CREATE VIRTUAL TABLE entries_fts USING fts5(
		key, content, tags,
		content = 'entries', content_rowid = 'id',
		tokenize = 'porter unicode61'
	);
	CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN
		INSERT INTO entries_fts(rowid, key, content, tags)
		VALUES (new.id, new.key, new.content, new.tags);
	END;
	CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
		INSERT INTO entries_fts(entries_fts, rowid, key, content, tags)
		VALUES ('delete', old.id, old.key, old.content, old.tags);
	END;
	CREATE TRIGGER entries_au AFTER UPDATE ON entries BEGIN
		INSERT INTO entries_fts(entries_fts, rowid, key, content, tags)
		VALUES ('delete', old.id, old.key, old.content, old.tags);
		INSERT INTO entries_fts(rowid, key, content, tags)
		VALUES (new.id, new.key, new.content, new.tags);
	END;`,
}

// migrate brings the file's schema to len(migrations). It runs in one
// IMMEDIATE transaction and rereads user_version inside it, so two processes
// opening a new file at once cannot both create the tables.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	defer tx.Rollback() // no-op after Commit
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("schema: read user_version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this program understands (%d); upgrade nsys-cortex", v, len(migrations))
	}
	if v == len(migrations) {
		return nil
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("schema: migrate to version %d: %w", i+1, err)
		}
	}
	// PRAGMA takes no bound parameters; len(migrations) is a constant.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return fmt.Errorf("schema: set user_version: %w", err)
	}
	return tx.Commit()
}

// querier is what reads need from *sql.DB and *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getEntry(ctx context.Context, q querier, key string) (*Entry, error) {
	row := q.QueryRowContext(ctx, `SELECT key, content, tags, created, updated FROM entries WHERE key = ?`, key)
	e, err := scanEntry(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("memory: no note with key %q; use memory_search to find the right key: %w", key, ErrNotFound)
	}
	return e, err
}

func putEntry(ctx context.Context, tx *sql.Tx, e *Entry, exists bool) error {
	tags := strings.Join(e.Tags, "\n")
	if exists {
		_, err := tx.ExecContext(ctx, `UPDATE entries SET content = ?, tags = ?, updated = ? WHERE key = ?`,
			e.Content, tags, e.Updated.UnixMilli(), e.Key)
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO entries (key, content, tags, created, updated) VALUES (?, ?, ?, ?, ?)`,
		e.Key, e.Content, tags, e.Created.UnixMilli(), e.Updated.UnixMilli())
	return err
}

func scanEntry(row interface{ Scan(...any) error }) (*Entry, error) {
	var e Entry
	var tags string
	var created, updated int64
	if err := row.Scan(&e.Key, &e.Content, &tags, &created, &updated); err != nil {
		return nil, err
	}
	e.Tags = splitTags(tags)
	e.Created = time.UnixMilli(created).UTC()
	e.Updated = time.UnixMilli(updated).UTC()
	return &e, nil
}

func splitTags(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, "\n")
}
