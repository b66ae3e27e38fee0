package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// apiCode returns the code and status of an API error ("" when err is none).
func apiCode(err error) (cortex.Code, int) {
	var ae cortex.APIError
	if !errors.As(err, &ae) {
		return "", 0
	}
	return ae.Code, ae.Status
}

// A snapshot round trip over the API on a process-mode neuron: create,
// list, change files, restore (they are back, processes ended), delete;
// and the errors on the way.
func TestSnapshots(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "sn")
	if _, err := n.WriteFile(ctx, "keep.txt", strings.NewReader("original"), nil); err != nil {
		t.Fatal(err)
	}
	if all, err := d.c.Snapshots(ctx, "sn"); err != nil || len(all) != 0 {
		t.Fatalf("list before any: %+v %v", all, err)
	}
	if status, body := raw(t, d, "GET", "/v1/neurons/sn/snapshots", ""); status != 200 || !strings.Contains(body, `"snapshots":[]`) {
		t.Fatalf("an empty list is [] on the wire: %d %s", status, body)
	}

	status, body := raw(t, d, "POST", "/v1/neurons/sn/snapshots", `{"name":"s1"}`)
	if status != http.StatusCreated || !strings.Contains(body, `"name":"s1"`) || !strings.Contains(body, `"kind":"files"`) {
		t.Fatalf("create: %d %s", status, body)
	}
	_, err := d.c.CreateSnapshot(ctx, "sn", "s1")
	if code, st := apiCode(err); !errors.As(err, &cortex.ExistsError{}) || code != cortex.CodeExists || st != http.StatusConflict ||
		!strings.Contains(err.Error(), "exists") {
		t.Fatalf("a name taken: %v (%s %d)", err, code, st)
	}
	all, err := d.c.Snapshots(ctx, "sn")
	if err != nil || len(all) != 1 {
		t.Fatalf("list: %+v %v", all, err)
	}
	if s := all[0]; s.Name != "s1" || s.Neuron != "sn" || s.Kind != "files" || s.Mode != "" || s.Files < 1 ||
		s.Bytes < int64(len("original")) || time.Since(s.Created) > time.Minute {
		t.Fatalf("the snapshot listed: %+v", s)
	}

	// Changed, added, and a process running: a restore undoes all three.
	if _, err := n.WriteFile(ctx, "keep.txt", strings.NewReader("changed"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteFile(ctx, "added.txt", strings.NewReader("new"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Argv: []string{"sleep", "60"}}}); err != nil {
		t.Fatal(err)
	}
	res, err := d.c.RestoreSnapshot(ctx, "sn", "s1")
	if err != nil || res.Snapshot.Name != "s1" || res.Snapshot.Kind != "files" || res.Neuron.ID != "sn" || res.Neuron.Status != "running" {
		t.Fatalf("restore: %+v %v", res, err)
	}
	if b, err := n.ReadFile(ctx, "keep.txt"); err != nil || string(b) != "original" {
		t.Fatalf("keep.txt after the restore: %q %v", b, err)
	}
	if _, err := n.Stat(ctx, "added.txt"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("a file added after the snapshot survived the restore: %v", err)
	}
	if ps, err := n.Processes(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("processes after the restore (it restarts the neuron): %+v %v", ps, err)
	}

	_, err = d.c.RestoreSnapshot(ctx, "sn", "nope")
	if code, st := apiCode(err); code != cortex.CodeNotFound || st != http.StatusNotFound || !strings.Contains(err.Error(), "no such snapshot") {
		t.Fatalf("restore of an unknown snapshot: %v", err)
	}
	if _, err := d.c.RestoreSnapshot(ctx, "nosuch", "s1"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("restore in an unknown neuron: %v", err)
	}
	if _, err := d.c.Snapshots(ctx, "nosuch"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("list of an unknown neuron: %v", err)
	}

	if err := d.c.DeleteSnapshot(ctx, "sn", "s1"); err != nil {
		t.Fatal(err)
	}
	err = d.c.DeleteSnapshot(ctx, "sn", "s1")
	if code, st := apiCode(err); code != cortex.CodeNotFound || st != http.StatusNotFound {
		t.Fatalf("delete of a deleted snapshot: %v", err)
	}
	if all, err := d.c.Snapshots(ctx, "sn"); err != nil || len(all) != 0 {
		t.Fatalf("list after delete: %+v %v", all, err)
	}
	if _, err := d.c.RestoreSnapshot(ctx, "sn", "s1"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("restore of a deleted snapshot: %v", err)
	}
	if status, body := raw(t, d, "DELETE", "/v1/neurons/sn/snapshots/s1", ""); status != http.StatusNotFound {
		t.Fatalf("raw delete of a deleted snapshot: %d %s", status, body)
	}
}

// Names and bodies the snapshot routes refuse, each with what is wrong.
func TestSnapshotBadInput(t *testing.T) {
	d := newDaemon(t, api.Options{})
	d.create(t, "sb")
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, says               string
	}{
		{"a path in the name", "POST", "/v1/neurons/sb/snapshots", `{"name":"../x"}`, 400, "BAD_REQUEST", `snapshot name \"../x\": use 1-64 letters`},
		{"a leading dot", "POST", "/v1/neurons/sb/snapshots", `{"name":".hidden"}`, 400, "BAD_REQUEST", "starting with a letter or digit"},
		{"too long", "POST", "/v1/neurons/sb/snapshots", `{"name":"` + strings.Repeat("a", 65) + `"}`, 400, "BAD_REQUEST", "1-64"},
		{"no name", "POST", "/v1/neurons/sb/snapshots", `{}`, 400, "BAD_REQUEST", `\"name\" is required`},
		{"a wrong field", "POST", "/v1/neurons/sb/snapshots", `{"nam":"x"}`, 400, "BAD_REQUEST", `nam`},
		{"no body", "POST", "/v1/neurons/sb/snapshots", ``, 400, "BAD_REQUEST", "no JSON body"},
		{"unknown neuron", "POST", "/v1/neurons/nosuch/snapshots", `{"name":"x"}`, 404, "NOT_FOUND", "nosuch"},
		{"bad name to restore", "POST", "/v1/neurons/sb/snapshots/-x/restore", `{}`, 400, "BAD_REQUEST", "snapshot name"},
		{"restore without a body", "POST", "/v1/neurons/sb/snapshots/x/restore", ``, 400, "BAD_REQUEST", "no JSON body"},
		{"restore from a form", "POST", "/v1/neurons/sb/snapshots/x/restore", `{}`, 400, "BAD_REQUEST", "application/json"},
		{"bad name to delete", "DELETE", "/v1/neurons/sb/snapshots/a%20b", ``, 400, "BAD_REQUEST", "snapshot name"},
		{"delete unknown", "DELETE", "/v1/neurons/sb/snapshots/none", ``, 404, "NOT_FOUND", "no such snapshot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.name == "restore from a form" {
				hdr = []string{"Content-Type", "application/x-www-form-urlencoded"}
			}
			status, body := raw(t, d, c.method, c.path, c.body, hdr...)
			if status != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) || !strings.Contains(body, c.says) {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
	if all, err := d.c.Snapshots(context.Background(), "sb"); err != nil || len(all) != 0 {
		t.Fatalf("a refused request left a snapshot: %+v %v", all, err)
	}
}

// A whole-VM snapshot is refused by a neuron of files before anything is
// stopped, with both kinds named.
func TestSnapshotKindMismatch(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "mm")
	if _, err := n.WriteFile(ctx, "now.txt", strings.NewReader("now"), nil); err != nil {
		t.Fatal(err)
	}
	p, err := n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Argv: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	// What a VM mode leaves: a record naming its mode (see sandbox.Snapshotter).
	dir := filepath.Join(d.lay.SnapshotsDir("mm"), "vm1")
	if err := os.MkdirAll(filepath.Join(dir, "vm"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := &store.Snapshot{Name: "vm1", Neuron: "mm", Created: time.Now().UTC(), Files: 1, Bytes: 4096, Mode: "qemu"}
	if err := store.WriteJSON(filepath.Join(dir, "snapshot.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := d.c.Snapshots(ctx, "mm")
	if err != nil || len(all) != 1 || all[0].Kind != "vm" || all[0].Mode != "qemu" {
		t.Fatalf("a VM snapshot listed: %+v %v", all, err)
	}
	_, err = d.c.RestoreSnapshot(ctx, "mm", "vm1")
	if code, st := apiCode(err); code != cortex.CodeBadRequest || st != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "of kind vm taken by mode qemu") || !strings.Contains(err.Error(), "only snapshots of kind files") {
		t.Fatalf("a VM snapshot into a neuron of files: %v", err)
	}
	// Nothing was stopped: the process runs on, the files are as they were.
	if got, err := n.Process(ctx, p.PID); err != nil || !got.Running {
		t.Fatalf("the process after a refused restore: %+v %v", got, err)
	}
	if b, err := n.ReadFile(ctx, "now.txt"); err != nil || string(b) != "now" {
		t.Fatalf("now.txt after a refused restore: %q %v", b, err)
	}
}

// Snapshot operations on one neuron run one at a time: creates and
// restores sent together all succeed, and the neuron ends running.
func TestSnapshotsConcurrent(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "cc")
	if _, err := n.WriteFile(ctx, "f", strings.NewReader("base"), nil); err != nil {
		t.Fatal(err)
	}
	base, err := d.c.CreateSnapshot(ctx, "cc", "base")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		wg.Go(func() {
			if _, err := d.c.CreateSnapshot(ctx, "cc", fmt.Sprintf("c%d", i)); err != nil {
				errs <- fmt.Errorf("create c%d: %w", i, err)
			}
		})
		wg.Go(func() {
			if _, err := d.c.RestoreSnapshot(ctx, "cc", "base"); err != nil {
				errs <- fmt.Errorf("restore %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, err := d.c.Snapshots(ctx, "cc")
	if err != nil || len(all) != 5 {
		t.Fatalf("after: %+v %v", all, err)
	}
	for _, s := range all {
		if s.Files != base.Files {
			t.Errorf("snapshot %s holds %d files, not the %d there are (a copy taken mid-restore?)", s.Name, s.Files, base.Files)
		}
	}
	if b, err := n.ReadFile(ctx, "f"); err != nil || string(b) != "base" {
		t.Fatalf("after: %q %v", b, err)
	}
}

// A client that goes away during a restore leaves the neuron running, the
// daemon with no request still in flight, and the next snapshot request
// free to run.
func TestSnapshotRestoreCancelled(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "rc")
	if _, err := n.WriteFile(ctx, "f", strings.NewReader("then"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.CreateSnapshot(ctx, "rc", "s"); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 80 * time.Millisecond} {
		if _, err := n.WriteFile(ctx, "f", strings.NewReader("now"), nil); err != nil {
			t.Fatalf("before cancelling after %s: %v", after, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(after, cancel)
		_, err := d.c.RestoreSnapshot(cctx, "rc", "s")
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("restore cancelled after %s: %v", after, err)
		}
		// The client went away; the server may have the request still, and
		// carries it to its end. Once it is done, the neuron runs, as the
		// snapshot or as before.
		waitIdle(t, d)
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := d.c.CreateSnapshot(wctx, "rc", fmt.Sprintf("after%d", after.Milliseconds())); err != nil {
			t.Fatalf("a create after a restore cancelled after %s: %v", after, err)
		}
		wcancel()
		got, err := d.c.Get(ctx, "rc")
		if err != nil || got.Status != "running" {
			t.Fatalf("the neuron after a restore cancelled after %s: %+v %v", after, got, err)
		}
		if b, err := n.ReadFile(ctx, "f"); err != nil || (string(b) != "then" && string(b) != "now") {
			t.Fatalf("f after a restore cancelled after %s: %q %v", after, b, err)
		}
	}
	waitIdle(t, d)
}

// waitIdle waits until the daemon answers no request but the one asking
// (which carries hdr: the token, where the daemon has one).
func waitIdle(t *testing.T, d *daemon, hdr ...string) {
	t.Helper()
	inFlight := regexp.MustCompile(`(?m)^cortex_api_requests_in_flight (\S+)$`)
	var m []string
	idle := func() bool {
		_, body := raw(t, d, "GET", "/metrics", "", hdr...)
		m = inFlight.FindStringSubmatch(body)
		return m != nil && m[1] == "1" // this request
	}
	if !waittest.Until(30*time.Second, idle) {
		t.Fatalf("requests still in flight: %v", m)
	}
}
