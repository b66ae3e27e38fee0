package logging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Defaults of Options left zero.
const (
	DefaultFile    = "cortex.log"
	DefaultMaxSize = 50 << 20
)

// Options say where a Logger writes and how it rotates.
type Options struct {
	// Dir is the directory of the log files, <home>/logs; made 0700 when
	// missing.
	Dir string
	// File is the name of the current file in Dir (default cortex.log).
	// Rotated files are named after it with the UTC time they were
	// rotated: cortex-2026-01-02T00-00-00.000.log.
	File string
	// Levels filter records by component.
	Levels Levels
	// Console, when not nil, also gets every record, as slog text lines.
	Console io.Writer
	// MaxSize rotates the file before it would pass this many bytes,
	// rounded up to whole MiB (default 50 MiB; 1 MiB at least).
	MaxSize int64
	// MaxAge removes rotated files older than this, rounded up to whole
	// days (0: no limit by age).
	MaxAge time.Duration
	// MaxFiles is how many rotated files are kept (0: no limit by count).
	MaxFiles int
}

// Logger owns the log file, its rotation and the writer every component
// shares. Its methods are safe for concurrent use.
type Logger struct {
	levels Levels
	base   slog.Handler
	path   string
	file   *lumberjack.Logger // nil for Discard
	out    *lockedWriter

	stop, done chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// New opens (or creates) the log file in opts.Dir, file mode 0600, and
// starts the daily rotation; Close stops it.
func New(opts Options) (*Logger, error) {
	return newLogger(opts, nextMidnight)
}

// nextMidnight is the first UTC midnight after t.
func nextMidnight(t time.Time) time.Time {
	return t.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
}

func newLogger(opts Options, next func(time.Time) time.Time) (*Logger, error) {
	if opts.Dir == "" {
		return nil, errors.New("logging: no log directory given")
	}
	if opts.File == "" {
		opts.File = DefaultFile
	}
	if opts.File != filepath.Base(opts.File) || strings.HasPrefix(opts.File, ".") {
		return nil, fmt.Errorf("logging: log file name %q: want a plain file name such as %s", opts.File, DefaultFile)
	}
	if opts.MaxSize < 0 || opts.MaxAge < 0 || opts.MaxFiles < 0 {
		return nil, fmt.Errorf("logging: negative limit (max size %d, max age %v, max files %d)", opts.MaxSize, opts.MaxAge, opts.MaxFiles)
	}
	if opts.MaxSize == 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("logging: making the log directory: %w", err)
	}
	path := filepath.Join(opts.Dir, opts.File)
	if err := os.Chmod(path, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("logging: %w", err)
	}
	const mib = 1 << 20
	const day = 24 * time.Hour
	file := &lumberjack.Logger{
		Filename:   path,
		MaxSize:    int(min((opts.MaxSize+mib-1)/mib, math.MaxInt32)),
		MaxBackups: opts.MaxFiles,
		MaxAge:     int(min((opts.MaxAge+day-1)/day, math.MaxInt32)),
		LocalTime:  false,
		Compress:   false,
	}
	// An empty write opens the file now, so a directory we cannot write
	// fails here and not on the first record.
	if _, err := file.Write(nil); err != nil {
		return nil, fmt.Errorf("logging: opening %s: %w", path, err)
	}

	l := &Logger{levels: opts.Levels, path: path, file: file, out: &lockedWriter{w: file},
		stop: make(chan struct{}), done: make(chan struct{})}
	all := &slog.HandlerOptions{Level: slog.Level(math.MinInt), ReplaceAttr: utcTime} // levelHandler filters
	l.base = slog.NewJSONHandler(l.out, all)
	if opts.Console != nil {
		console := slog.NewTextHandler(&lockedWriter{w: opts.Console}, &slog.HandlerOptions{Level: slog.Level(math.MinInt)})
		l.base = slog.NewMultiHandler(l.base, console)
	}
	go l.rotateDaily(next)
	return l, nil
}

// utcTime writes record times in UTC, the zone rotation uses.
func utcTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}

// Discard returns a Logger that writes nothing, for tests and for when
// logging is off.
func Discard() *Logger {
	return &Logger{base: slog.DiscardHandler, out: &lockedWriter{w: io.Discard}}
}

// For returns the logger of component: its records carry
// component=<component> and are kept from the component's level up. An
// empty component gets the default level and no attribute.
func (l *Logger) For(component string) *slog.Logger {
	h := l.base
	if component != "" {
		h = h.WithAttrs([]slog.Attr{slog.String("component", component)})
	}
	return slog.New(&levelHandler{min: l.levels.Level(component), next: h})
}

// Path is the current log file ("" for Discard).
func (l *Logger) Path() string { return l.path }

// Close stops the daily rotation and closes the file; records logged
// after it are dropped. (lumberjack's own clean-up goroutine, started by
// the first open, lives until the process ends; a goroutine-leak check
// must ignore lumberjack.(*Logger).millRun.)
func (l *Logger) Close() error {
	l.closeOnce.Do(func() {
		if l.stop != nil {
			close(l.stop)
			<-l.done
		}
		l.out.close()
		if l.file != nil {
			l.closeErr = l.file.Close()
		}
	})
	return l.closeErr
}

// rotateDaily rotates the file at each time next gives (every UTC
// midnight), unless it is empty, until Close.
func (l *Logger) rotateDaily(next func(time.Time) time.Time) {
	defer close(l.done)
	at := next(time.Now())
	for {
		t := time.NewTimer(time.Until(at))
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		// From the later of now and the moment planned, so neither a timer
		// that fires early nor a machine that slept rotates twice.
		now := time.Now()
		at = next(maxTime(now, at))
		if st, err := os.Stat(l.path); err != nil || st.Size() == 0 {
			continue
		}
		if err := l.file.Rotate(); err != nil {
			l.For("logging").Error("daily rotation failed", "path", l.path, "err", err)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// levelHandler keeps the records of one component from its level up.
type levelHandler struct {
	min  slog.Level
	next slog.Handler
}

func (h *levelHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= h.min && h.next.Enabled(ctx, lv)
}

func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.next.Handle(ctx, r)
}

func (h *levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &levelHandler{min: h.min, next: h.next.WithAttrs(attrs)}
}

func (h *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{min: h.min, next: h.next.WithGroup(name)}
}

// lockedWriter serialises the writes of every handler sharing it (each
// slog handler writes a record in one Write), so lines never interleave,
// and drops writes once closed.
type lockedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, os.ErrClosed
	}
	return w.w.Write(p)
}

func (w *lockedWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
