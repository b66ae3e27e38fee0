package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
)

const specPath = "testdata/firecracker.yaml"

func loadSpec(t testing.TB) *fakefc.Spec {
	t.Helper()
	s, err := fakefc.LoadSpec(specPath)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeAPI is an in-process fake Firecracker API over a Unix socket, its
// jail a temporary directory.
type fakeAPI struct {
	root   string
	client *Client
	srv    *fakefc.Server
	mu     sync.Mutex
	calls  []fakefc.Call
}

func (f *fakeAPI) recorded() []fakefc.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakefc.Call(nil), f.calls...)
}

func newFakeAPI(t *testing.T, hooks fakefc.Hooks) *fakeAPI {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeAPI{root: dir}
	f.srv = fakefc.NewServer(loadSpec(t), dir, "test-vm", fakefc.Version, fakefc.Identity{}, hooks, func(c fakefc.Call) {
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
	})
	ln, err := net.Listen("unix", filepath.Join(dir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: f.srv}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	f.client = NewClient(filepath.Join(dir, "api.sock"))
	t.Cleanup(f.client.Close)
	for _, p := range []string{jailKernel, jailInitrd, jailRootDisk, jailOverlay, jailLog, jailMetrics} {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fakeAPI) mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Every request the client can send — each method, with zero values where
// a field is optional — has only fields the pinned description defines, and
// all the ones it requires; the fake refuses anything else with a 400, and
// the recorded bodies are checked against the description once more here.
func TestClientRequestsMatchSpec(t *testing.T) {
	ctx := context.Background()
	f := newFakeAPI(t, fakefc.Hooks{})
	c := f.client
	tb := &TokenBucket{Size: 1 << 20, RefillTime: 100}
	f.mustOK(t, "logger", c.PutLogger(ctx, Logger{LogPath: jailLog, Level: "Warning", ShowLevel: true, ShowLogOrigin: true, Module: "api_server"}))
	f.mustOK(t, "logger (empty)", c.PutLogger(ctx, Logger{}))
	f.mustOK(t, "metrics", c.PutMetrics(ctx, Metrics{MetricsPath: jailMetrics}))
	f.mustOK(t, "machine", c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 2, MemSizeMiB: 256, SMT: true, TrackDirtyPages: true, CPUTemplate: "None", HugePages: "None"}))
	f.mustOK(t, "machine (minimal)", c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1, MemSizeMiB: 128}))
	f.mustOK(t, "boot source", c.PutBootSource(ctx, BootSource{KernelImagePath: jailKernel, InitrdPath: jailInitrd, BootArgs: "quiet"}))
	f.mustOK(t, "boot source (kernel only)", c.PutBootSource(ctx, BootSource{KernelImagePath: jailKernel}))
	f.mustOK(t, "root drive", c.PutDrive(ctx, Drive{DriveID: "rootfs", PathOnHost: jailRootDisk, IsReadOnly: true}))
	f.mustOK(t, "drive (all fields)", c.PutDrive(ctx, Drive{DriveID: "overlay", PathOnHost: jailOverlay, IsRootDevice: false, PartUUID: "x",
		CacheType: "Writeback", IOEngine: "Sync", RateLimiter: &RateLimiter{Bandwidth: tb, Ops: &TokenBucket{Size: 100, RefillTime: 1000, OneTimeBurst: 10}}}))
	f.mustOK(t, "network", c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0", GuestMAC: "06:00:00:00:00:01",
		RxRateLimiter: &RateLimiter{Bandwidth: tb}, TxRateLimiter: &RateLimiter{Ops: tb}}))
	f.mustOK(t, "vsock", c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: jailVsock}))
	f.mustOK(t, "balloon", c.PutBalloon(ctx, Balloon{AmountMiB: 0, DeflateOnOOM: false}))
	f.mustOK(t, "balloon (stats)", c.PutBalloon(ctx, Balloon{AmountMiB: 64, DeflateOnOOM: true, StatsPollingIntervalS: 5}))
	info, err := c.Describe(ctx)
	f.mustOK(t, "describe", err)
	if info.State != "Not started" || info.AppName != "Firecracker" || info.VMMVersion != fakefc.Version {
		t.Errorf("describe before start: %+v", info)
	}
	f.mustOK(t, "start", c.Action(ctx, ActionInstanceStart))
	f.mustOK(t, "flush metrics", c.Action(ctx, ActionFlushMetrics))
	f.mustOK(t, "pause", c.PatchVM(ctx, VMPaused))
	f.mustOK(t, "snapshot", c.CreateSnapshot(ctx, SnapshotCreate{SnapshotType: "Full", SnapshotPath: jailSnapState, MemFilePath: jailSnapMem}))
	f.mustOK(t, "snapshot (default type)", c.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: "/s2", MemFilePath: "/m2"}))
	f.mustOK(t, "resume", c.PatchVM(ctx, VMResumed))
	if info, _ := c.Describe(ctx); info.State != "Running" {
		t.Errorf("after resume: %+v", info)
	}

	// A fresh process loads the snapshot.
	g := newFakeAPI(t, fakefc.Hooks{})
	for _, p := range []string{jailSnapState, jailSnapMem} {
		f.mustOK(t, "copying the snapshot", sparseCopy(filepath.Join(f.root, p), filepath.Join(g.root, p)))
	}
	f.mustOK(t, "load", g.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: jailSnapState,
		MemBackend: &MemoryBackend{BackendType: "File", BackendPath: jailSnapMem}}))
	if info, _ := g.client.Describe(ctx); info.State != "Paused" {
		t.Errorf("after load: %+v", info)
	}
	f.mustOK(t, "resume the loaded VM", g.client.PatchVM(ctx, VMResumed))

	spec := loadSpec(t)
	calls := append(f.recorded(), g.recorded()...)
	for _, call := range calls {
		if call.Status/100 != 2 {
			t.Errorf("%s: HTTP %d %s", call, call.Status, call.Fault)
		}
		op, _, ok := spec.Route(call.Method, call.Path)
		if !ok {
			t.Errorf("%s: not in the pinned description", call)
			continue
		}
		if err := spec.ValidateBody(op, call.Body); err != nil {
			t.Errorf("%s %s: %v", call, call.Body, err)
		}
	}
	if len(calls) < 20 {
		t.Fatalf("only %d calls were recorded", len(calls))
	}
}

// What Firecracker refuses, the fake refuses, with a fault_message the
// client returns as an APIError.
func TestFakeRefusesWhatFirecrackerRefuses(t *testing.T) {
	f := newFakeAPI(t, fakefc.Hooks{})
	raw := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
		resp, err := f.client.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var fault struct {
			FaultMessage string `json:"fault_message"`
		}
		json.NewDecoder(resp.Body).Decode(&fault)
		return resp.StatusCode, fault.FaultMessage
	}
	for _, c := range []struct{ method, path, body, says string }{
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"mem_size":1}`, "unknown field `mem_size`"},
		{"PUT", "/machine-config", `{"vcpu_count":1}`, "missing field `mem_size_mib`"},
		{"PUT", "/machine-config", `{"vcpu_count":"1","mem_size_mib":128}`, "expected an integer"},
		{"PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":128}`, "outside"},
		{"PUT", "/drives/rootfs", `{"drive_id":"other","is_root_device":false,"path_on_host":"/rootfs.ext4"}`, "does not match"},
		{"PUT", "/drives/rootfs", `{"drive_id":"rootfs","path_on_host":"/rootfs.ext4"}`, "missing field `is_root_device`"},
		{"PUT", "/drives/rootfs", `{"drive_id":"rootfs","is_root_device":false,"path_on_host":"/nope"}`, "No such file"},
		{"PUT", "/drives/rootfs", `{"drive_id":"rootfs","is_root_device":false,"path_on_host":"/rootfs.ext4","cache_type":"Fast"}`, "unknown variant"},
		{"PUT", "/vsock", `{"guest_cid":2,"uds_path":"/v.sock"}`, "outside"},
		{"PUT", "/vsock", `{"guest_cid":3,"uds_path":"/v.sock","vsock_override":{}}`, "unknown field"},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/s","mem_backend":{"backend_type":"File","backend_path":"/m"},"clock_realtime":true}`, "unknown field `clock_realtime`"},
		{"PUT", "/balloon", `{"amount_mib":1,"deflate_on_oom":true,"free_page_reporting":true}`, "unknown field `free_page_reporting`"},
		{"PUT", "/boot-source", `{"kernel_image_path":"/vmlinux"} {}`, "trailing data"},
		{"PUT", "/boot-source", `not json`, "not JSON"},
		{"PUT", "/boot-source", ``, "missing"},
		{"PUT", "/no-such", `{}`, "Invalid request method and/or path"},
		{"DELETE", "/vsock", ``, "Invalid request method and/or path"},
		{"PUT", "/actions", `{"action_type":"InstanceStart"}`, "without kernel configuration"},
		{"PATCH", "/vm", `{"state":"Paused"}`, "before starting"},
		{"PUT", "/snapshot/create", `{"snapshot_path":"/s","mem_file_path":"/m"}`, "before starting"},
		{"PUT", "/actions", `{"action_type":"Reboot"}`, "unknown variant"},
	} {
		status, fault := raw(c.method, c.path, c.body)
		if status != http.StatusBadRequest || !strings.Contains(fault, c.says) {
			t.Errorf("%s %s %s: HTTP %d %q, want 400 saying %q", c.method, c.path, c.body, status, fault, c.says)
		}
	}
	err := f.client.PutMachineConfig(context.Background(), MachineConfig{VCPUCount: 64, MemSizeMiB: 128})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Fault, "vcpu_count") ||
		!strings.Contains(err.Error(), "PUT /machine-config") {
		t.Fatalf("the client's error: %#v", err)
	}
}

// Firecracker's state machine: configuration before InstanceStart only,
// one InstanceStart, snapshots only while paused, load only first.
func TestFakeStateMachine(t *testing.T) {
	ctx := context.Background()
	f := newFakeAPI(t, fakefc.Hooks{})
	c := f.client
	wantFault := func(what, says string, err error) {
		t.Helper()
		var ae *APIError
		if !errors.As(err, &ae) || !strings.Contains(ae.Fault, says) {
			t.Errorf("%s: got %v, want a fault saying %q", what, err, says)
		}
	}
	f.mustOK(t, "metrics", c.PutMetrics(ctx, Metrics{MetricsPath: jailMetrics}))
	wantFault("metrics twice", "Reinitialization", c.PutMetrics(ctx, Metrics{MetricsPath: jailMetrics}))
	f.mustOK(t, "boot source", c.PutBootSource(ctx, BootSource{KernelImagePath: jailKernel}))
	wantFault("load after configuring", "not allowed after configuring boot-specific resources",
		c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: "/s", MemBackend: &MemoryBackend{BackendType: "File", BackendPath: "/m"}}))
	f.mustOK(t, "start", c.Action(ctx, ActionInstanceStart))
	wantFault("second start", "after starting", c.Action(ctx, ActionInstanceStart))
	wantFault("drive after start", "after starting", c.PutDrive(ctx, Drive{DriveID: "x", PathOnHost: jailOverlay}))
	wantFault("machine after start", "after starting", c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1, MemSizeMiB: 128}))
	wantFault("vsock after start", "after starting", c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: "/v"}))
	wantFault("network after start", "after starting", c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "e", HostDevName: "t"}))
	wantFault("snapshot while running", "must be paused", c.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: "/s", MemFilePath: "/m"}))
	f.mustOK(t, "pause", c.PatchVM(ctx, VMPaused))
	wantFault("diff snapshot", "track_dirty_pages", c.CreateSnapshot(ctx, SnapshotCreate{SnapshotType: "Diff", SnapshotPath: "/s", MemFilePath: "/m"}))
	wantFault("load after start", "not allowed", c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: "/s", MemBackend: &MemoryBackend{BackendType: "File", BackendPath: "/m"}}))

	g := newFakeAPI(t, fakefc.Hooks{})
	wantFault("load without files", "No such file", g.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: "/s", MemBackend: &MemoryBackend{BackendType: "File", BackendPath: "/m"}}))
	wantFault("load with both memories", "exactly one", g.client.do(ctx, http.MethodPut, "/snapshot/load",
		map[string]any{"snapshot_path": "/s", "mem_file_path": "/m", "mem_backend": map[string]string{"backend_type": "File", "backend_path": "/m"}}, nil))
}

// The pinned description is whole: every reference resolves, and every
// operation the client uses is in it.
func TestSpecIsWhole(t *testing.T) {
	spec := loadSpec(t)
	for path, ops := range spec.Paths {
		for method, op := range ops {
			if p := op.Body(); p != nil {
				if err := spec.ValidateBody(op, []byte(`{}`)); err != nil && strings.Contains(err.Error(), "unknown reference") {
					t.Errorf("%s %s: %v", method, path, err)
				}
			}
		}
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/"}, {"PUT", "/logger"}, {"PUT", "/metrics"}, {"PUT", "/machine-config"}, {"PUT", "/boot-source"},
		{"PUT", "/drives/rootfs"}, {"PUT", "/network-interfaces/eth0"}, {"PUT", "/vsock"}, {"PUT", "/balloon"},
		{"PUT", "/actions"}, {"PATCH", "/vm"}, {"PUT", "/snapshot/create"}, {"PUT", "/snapshot/load"},
	} {
		if _, _, ok := spec.Route(c.method, c.path); !ok {
			t.Errorf("%s %s is not in %s", c.method, c.path, specPath)
		}
	}
	if spec.Info.Version != PinnedVersion {
		t.Errorf("%s describes v%s; the backend pins v%s", specPath, spec.Info.Version, PinnedVersion)
	}
}
