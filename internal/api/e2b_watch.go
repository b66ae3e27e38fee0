package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/nsys-cortex/cortex/internal/e2b/proto/filesystem"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// envd's directory watches: WatchDir streams a directory's changes; the
// polling trio (CreateWatcher, GetWatcherEvents, RemoveWatcher) keeps a
// watch in the daemon and hands out what it saw. Both are the agent's
// fs_watch (link.Client.Watch), whose events the link checks.

// The watches' bounds: how many a sandbox and the daemon keep open
// (WatchDir streams and polling watchers together: each is an inotify
// instance in the neuron), how much unread a polling watcher holds (more:
// it ends, saying so), and how long one lives unpolled.
const (
	maxWatchersPerSandbox = 16
	maxWatchers           = 256
	maxWatcherEvents      = 10000
	maxWatcherBytes       = 1 << 20
	watcherIdle           = 5 * time.Minute
	// watchKeepAlive is how often a quiet WatchDir stream says it lives
	// (E2B's SDKs ask every 50 s).
	watchKeepAlive = 50 * time.Second
)

var fsOps = map[string]filesystem.EventType{
	protocol.FsCreate: filesystem.EventType_EVENT_TYPE_CREATE,
	protocol.FsWrite:  filesystem.EventType_EVENT_TYPE_WRITE,
	protocol.FsRemove: filesystem.EventType_EVENT_TYPE_REMOVE,
	protocol.FsRename: filesystem.EventType_EVENT_TYPE_RENAME,
	protocol.FsChmod:  filesystem.EventType_EVENT_TYPE_CHMOD,
}

func fsEvent(ev protocol.FsEvent) *filesystem.FilesystemEvent {
	return &filesystem.FilesystemEvent{Name: ev.Name, Type: fsOps[ev.Op]}
}

func (f envdFS) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	c, t, err := f.e.client(ctx, gate.FileRead, "envd Filesystem.WatchDir")
	if err != nil {
		return err
	}
	ws := &f.e.watchers
	if err := ws.reserve(t); err != nil {
		return err
	}
	defer ws.release(t)
	var mu sync.Mutex // Send is not for two goroutines at once
	send := func(r *filesystem.WatchDirResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(r)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tick := time.NewTicker(watchKeepAlive)
	defer tick.Stop()
	go func() {
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
				if err := f.e.stillAdmitted(wctx, gate.FileRead); err != nil {
					cancel(err)
					return
				}
				if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	var sendErr error
	err = c.Watch(wctx, &protocol.FsWatchArgs{Path: req.Msg.GetPath(), Recursive: req.Msg.GetRecursive()}, func() {
		sendErr = send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}})
	}, func(ev protocol.FsEvent) error {
		if sendErr != nil {
			return sendErr
		}
		return send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: fsEvent(ev)}})
	})
	if cause := context.Cause(wctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the key went, or the client did
	}
	if err == nil {
		err = sendErr
	}
	return connectError(err)
}

// pollWatcher is one watch of the polling trio.
type pollWatcher struct {
	t      envdTarget
	cancel context.CancelFunc

	mu       sync.Mutex
	events   []*filesystem.FilesystemEvent
	bytes    int   // what events hold, roughly
	err      error // why it ended (nil: it runs, or ended because the directory went)
	ended    bool
	lastPoll time.Time
}

// watchers are the open watches: the polling trio's by id, and how many
// of every kind each sandbox has.
type watchers struct {
	mu      sync.Mutex
	by      map[string]*pollWatcher
	open    map[envdTarget]int
	total   int
	janitor bool // a goroutine sweeps while polling watchers exist
}

// reserve takes a slot for one more watch of sandbox t, or says why not.
// Taken before the watch starts, so that requests at once cannot pass the
// bound together.
func (ws *watchers) reserve(t envdTarget) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.total >= maxWatchers || ws.open[t] >= maxWatchersPerSandbox {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("this sandbox has %d watches open (at most %d) and the daemon %d (at most %d): end one", ws.open[t], maxWatchersPerSandbox, ws.total, maxWatchers))
	}
	if ws.open == nil {
		ws.open = map[envdTarget]int{}
	}
	ws.open[t]++
	ws.total++
	return nil
}

// release gives back a slot of sandbox t.
func (ws *watchers) release(t envdTarget) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.releaseLocked(t)
}

func (ws *watchers) releaseLocked(t envdTarget) {
	ws.total--
	if ws.open[t]--; ws.open[t] <= 0 {
		delete(ws.open, t)
	}
}

// sweep ends the polling watchers nobody has polled for watcherIdle.
func (ws *watchers) sweep(now time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, w := range ws.by {
		w.mu.Lock()
		idle := now.Sub(w.lastPoll) > watcherIdle
		w.mu.Unlock()
		if idle {
			ws.removeLocked(id)
		}
	}
}

// sweepWhileAny sweeps every minute while there are polling watchers, or
// until done; started with the first watcher, it ends with the last.
func (ws *watchers) sweepWhileAny(done <-chan struct{}) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-done:
		case now := <-tick.C:
			ws.sweep(now)
		}
		ws.mu.Lock()
		if len(ws.by) == 0 || isDone(done) {
			ws.janitor = false
			ws.mu.Unlock()
			return
		}
		ws.mu.Unlock()
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// find is watcher id, if it is sandbox t's.
func (ws *watchers) find(t envdTarget, id string) (*pollWatcher, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.by[id]
	if w == nil || w.t != t {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no watcher %q in this sandbox", id))
	}
	return w, nil
}

func (f envdFS) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	c, t, err := f.e.client(ctx, gate.FileRead, "envd Filesystem.CreateWatcher")
	if err != nil {
		return nil, err
	}
	ws := &f.e.watchers
	ws.sweep(time.Now())
	if err := ws.reserve(t); err != nil {
		return nil, err
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	// The watch outlives this request: it ends when removed, unpolled
	// for watcherIdle, when its directory goes, or when the daemon stops.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(f.e.s.streams, cancel)
	w := &pollWatcher{t: t, cancel: cancel, lastPoll: time.Now()}
	ready, started := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		defer stop()
		err := c.Watch(wctx, &protocol.FsWatchArgs{Path: req.Msg.GetPath(), Recursive: req.Msg.GetRecursive()}, func() { once.Do(func() { close(ready) }) }, func(ev protocol.FsEvent) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.events) >= maxWatcherEvents || w.bytes+len(ev.Name)+16 > maxWatcherBytes {
				return protocol.Errorf(protocol.CodeTooLarge, "watcher %s: more than %d changes (or %d bytes of names) unread: poll more often, or watch less", id, maxWatcherEvents, maxWatcherBytes)
			}
			w.events = append(w.events, fsEvent(ev))
			w.bytes += len(ev.Name) + 16
			return nil
		})
		w.mu.Lock()
		w.err, w.ended = err, true
		w.mu.Unlock()
		started <- err
	}()
	select {
	case <-ready:
	case err := <-started:
		cancel()
		ws.release(t)
		if err == nil {
			err = errors.New("the watch ended before it began")
		}
		return nil, connectError(err)
	case <-ctx.Done():
		cancel()
		ws.release(t)
		return nil, connectError(ctx.Err())
	}
	ws.mu.Lock()
	if ws.by == nil {
		ws.by = map[string]*pollWatcher{}
	}
	ws.by[id] = w
	if !ws.janitor {
		ws.janitor = true
		go ws.sweepWhileAny(f.e.s.streams.Done())
	}
	ws.mu.Unlock()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (f envdFS) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	_, t, err := f.e.client(ctx, gate.FileRead, "envd Filesystem.GetWatcherEvents")
	if err != nil {
		return nil, err
	}
	w, err := f.e.watchers.find(t, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	f.e.watchers.sweep(time.Now())
	w.mu.Lock()
	evs, werr, ended := w.events, w.err, w.ended
	w.events, w.bytes, w.lastPoll = nil, 0, time.Now()
	w.mu.Unlock()
	if len(evs) == 0 && ended && werr != nil {
		f.e.watchers.remove(req.Msg.GetWatcherId())
		return nil, connectError(werr)
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: evs}), nil
}

func (f envdFS) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	_, t, err := f.e.client(ctx, gate.FileRead, "envd Filesystem.RemoveWatcher")
	if err != nil {
		return nil, err
	}
	if _, err := f.e.watchers.find(t, req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	f.e.watchers.remove(req.Msg.GetWatcherId())
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

// remove ends watcher id.
func (ws *watchers) remove(id string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.removeLocked(id)
}

func (ws *watchers) removeLocked(id string) {
	if w := ws.by[id]; w != nil {
		w.cancel()
		delete(ws.by, id)
		ws.releaseLocked(w.t)
	}
}
