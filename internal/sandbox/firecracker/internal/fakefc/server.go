package fakefc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// maxPayload is Firecracker's default API payload limit.
const maxPayload = 51200

// Call is one API request as the fake saw it.
type Call struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body,omitempty"`
	Fault  string          `json:"fault,omitempty"`
}

// String is "METHOD /path".
func (c Call) String() string { return c.Method + " " + c.Path }

// VM is what the API has configured.
type VM struct {
	VCPUs      int             `json:"vcpus"`
	MemMiB     int             `json:"memMiB"`
	Kernel     string          `json:"kernel,omitempty"`
	Initrd     string          `json:"initrd,omitempty"`
	BootArgs   string          `json:"bootArgs,omitempty"`
	Drives     []DriveState    `json:"drives,omitempty"`
	Vsock      *VsockState     `json:"vsock,omitempty"`
	Interfaces []string        `json:"interfaces,omitempty"`
	Balloon    bool            `json:"balloon,omitempty"`
	Muxer      *Muxer          `json:"-"`
	Guest      json.RawMessage `json:"guest,omitempty"` // the guest's state, in a snapshot
}

// DriveState is a configured drive.
type DriveState struct {
	ID       string `json:"id"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly"`
}

// VsockState is the configured vsock device.
type VsockState struct {
	CID uint32 `json:"cid"`
	UDS string `json:"uds"`
}

// Hooks are the guest's side of the VM's life.
type Hooks struct {
	// Boot runs the guest after InstanceStart.
	Boot func(vm *VM)
	// Pause and Resume stop and restart the guest's vCPUs.
	Pause, Resume func()
	// Save returns the guest's state for a snapshot.
	Save func() json.RawMessage
	// Restore brings a loaded snapshot's guest back (paused).
	Restore func(vm *VM)
}

// Server is the fake Firecracker API of one process.
type Server struct {
	spec    *Spec
	root    string // the jail: paths in requests resolve inside it
	id      string
	version string
	as      Identity
	hooks   Hooks
	record  func(Call)

	mu         sync.Mutex
	vm         VM
	started    bool // InstanceStart, or a snapshot loaded
	paused     bool
	bootConfig bool // a resource other than the logger and metrics was configured
	metrics    bool
}

// Identity is who the fake Firecracker runs as once jailed: the files it
// opens must be open to that user, as they would be after the jailer
// dropped its privileges.
type Identity struct {
	UID, GID int
	Set      bool
}

// NewServer returns the API of instance id whose jail is root.
func NewServer(spec *Spec, root, id, version string, as Identity, hooks Hooks, record func(Call)) *Server {
	return &Server{spec: spec, root: root, id: id, version: version, as: as, hooks: hooks, record: record,
		vm: VM{VCPUs: 1, MemMiB: 128}}
}

// VMConfig returns a copy of what is configured.
func (s *Server) VMConfig() VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vm
}

type fault struct {
	status int
	msg    string
}

func (f *fault) Error() string { return f.msg }

func bad(format string, args ...any) *fault {
	return &fault{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

const (
	afterStart  = "The requested operation is not supported after starting the microVM."
	beforeStart = "The requested operation is not supported before starting the microVM."
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	call := Call{Method: r.Method, Path: r.URL.Path}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPayload+1))
	var out any
	var f *fault
	switch {
	case err != nil:
		f = bad("Reading the request failed: %v", err)
	case len(body) > maxPayload:
		f = bad("Request payload with size %d is larger than the limit of %d allowed by server.", len(body), maxPayload)
	case r.Header.Get("Transfer-Encoding") == "chunked" || len(r.TransferEncoding) > 0:
		f = bad("Unsupported transfer encoding: the API takes a Content-Length body.")
	default:
		if len(body) > 0 {
			call.Body = json.RawMessage(body)
		}
		out, f = s.handle(r.Method, r.URL.Path, body)
	}
	if f != nil {
		call.Status, call.Fault = f.status, f.msg
		s.record(call)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		json.NewEncoder(w).Encode(map[string]string{"fault_message": f.msg})
		return
	}
	if out == nil {
		call.Status = http.StatusNoContent
		s.record(call)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	call.Status = http.StatusOK
	s.record(call)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (s *Server) handle(method, path string, body []byte) (any, *fault) {
	op, vars, ok := s.spec.Route(method, path)
	if !ok || op == nil {
		return nil, bad("Invalid request method and/or path: %s %s.", method, path)
	}
	if err := s.spec.ValidateBody(op, body); err != nil {
		return nil, bad("An error occurred when deserializing the json body of a request: %v.", err)
	}
	var m map[string]any
	if len(body) > 0 {
		json.Unmarshal(body, &m) // valid JSON: ValidateBody decoded it
	}
	for _, key := range []string{"drive_id", "iface_id"} {
		if v, ok := vars[key]; ok && m[key] != v {
			return nil, bad("The id from the path does not match the id from the body!")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch op.OperationID {
	case "describeInstance":
		return s.describe(), nil
	case "getFirecrackerVersion":
		return map[string]string{"firecracker_version": s.version}, nil
	case "getMachineConfiguration":
		return map[string]any{"vcpu_count": s.vm.VCPUs, "mem_size_mib": s.vm.MemMiB, "smt": false, "track_dirty_pages": false}, nil
	case "putLogger":
		if p := str(m, "log_path"); p != "" { // without one Firecracker logs to stdout
			if f := s.needFile(p, true, "Invalid logger path"); f != nil {
				return nil, f
			}
			if lf, err := os.OpenFile(s.resolve(p), os.O_WRONLY|os.O_APPEND, 0); err == nil {
				fmt.Fprintf(lf, "[%s:main] Running Firecracker v%s (fake)\n", s.id, s.version)
				lf.Close()
			}
		}
		return nil, nil
	case "putMetrics":
		if s.metrics {
			return nil, bad("Reinitialization of metrics not allowed.")
		}
		if f := s.needFile(str(m, "metrics_path"), true, "Invalid metrics path"); f != nil {
			return nil, f
		}
		s.metrics = true
		return nil, nil
	case "createSyncAction":
		return nil, s.action(str(m, "action_type"))
	case "patchVm":
		return nil, s.patchVM(str(m, "state"))
	case "createSnapshot":
		return nil, s.createSnapshot(m)
	case "loadSnapshot":
		return nil, s.loadSnapshot(m)
	case "describeBalloonConfig":
		if !s.vm.Balloon {
			return nil, bad("The balloon device is not configured.")
		}
		return map[string]any{"amount_mib": 0, "deflate_on_oom": false}, nil
	}
	if strings.HasPrefix(op.OperationID, "patch") { // post-boot updates of devices
		if !s.started {
			return nil, bad(beforeStart)
		}
		return nil, bad("This fake does not emulate %s.", op.OperationID)
	}
	if s.started {
		return nil, bad(afterStart)
	}
	s.bootConfig = true
	return nil, s.configure(op.OperationID, m)
}

// configure applies a pre-boot configuration call.
func (s *Server) configure(op string, m map[string]any) *fault {
	switch op {
	case "putMachineConfiguration":
		s.vm.VCPUs, s.vm.MemMiB = num(m, "vcpu_count"), num(m, "mem_size_mib")
		if s.vm.MemMiB <= 0 {
			return bad("The memory size (MiB) is invalid.")
		}
	case "putGuestBootSource":
		if f := s.needFile(str(m, "kernel_image_path"), false, "Invalid kernel path"); f != nil {
			return f
		}
		if p := str(m, "initrd_path"); p != "" {
			if f := s.needFile(p, false, "Invalid initrd path"); f != nil {
				return f
			}
		}
		s.vm.Kernel, s.vm.Initrd, s.vm.BootArgs = str(m, "kernel_image_path"), str(m, "initrd_path"), str(m, "boot_args")
	case "putGuestDriveByID":
		p, ro := str(m, "path_on_host"), m["is_read_only"] == true
		if p == "" {
			return bad("Unable to create the block device: a virtio-block drive needs path_on_host.")
		}
		if f := s.needFile(p, !ro, "Unable to create the block device"); f != nil {
			return f
		}
		d := DriveState{ID: str(m, "drive_id"), Path: p, ReadOnly: ro}
		for i := range s.vm.Drives {
			if s.vm.Drives[i].ID == d.ID {
				s.vm.Drives[i] = d
				return nil
			}
		}
		s.vm.Drives = append(s.vm.Drives, d)
	case "putGuestNetworkInterfaceByID":
		s.vm.Interfaces = append(s.vm.Interfaces, str(m, "host_dev_name"))
	case "putGuestVsock":
		if s.vm.Vsock != nil {
			s.vm.Muxer.Close()
		}
		v := &VsockState{CID: uint32(num(m, "guest_cid")), UDS: str(m, "uds_path")}
		mux, err := NewMuxer(s.resolve(v.UDS))
		if err != nil {
			return bad("Cannot create vsock device: %v", err)
		}
		s.chown(s.resolve(v.UDS))
		s.vm.Vsock, s.vm.Muxer = v, mux
	case "putBalloon":
		s.vm.Balloon = true
	default:
		return bad("This fake does not emulate %s.", op)
	}
	return nil
}

func (s *Server) describe() map[string]string {
	state := "Not started"
	switch {
	case s.started && s.paused:
		state = "Paused"
	case s.started:
		state = "Running"
	}
	return map[string]string{"app_name": "Firecracker", "id": s.id, "state": state, "vmm_version": s.version}
}

func (s *Server) action(a string) *fault {
	switch a {
	case "InstanceStart":
		if s.started {
			return bad(afterStart)
		}
		if s.vm.Kernel == "" {
			return bad("Cannot start microvm without kernel configuration.")
		}
		s.started = true
		if s.hooks.Boot != nil {
			s.hooks.Boot(&s.vm)
		}
	case "FlushMetrics", "SendCtrlAltDel":
		if !s.started {
			return bad(beforeStart)
		}
	}
	return nil
}

func (s *Server) patchVM(state string) *fault {
	if !s.started {
		return bad(beforeStart)
	}
	switch state {
	case "Paused":
		if !s.paused && s.hooks.Pause != nil {
			s.hooks.Pause()
		}
		s.paused = true
	case "Resumed":
		if s.paused && s.hooks.Resume != nil {
			s.hooks.Resume()
		}
		s.paused = false
	}
	return nil
}

// snapshotFile is what the fake writes as a snapshot's VM state.
type snapshotFile struct {
	Version string `json:"firecracker_version"`
	VM      VM     `json:"vm"`
}

func (s *Server) createSnapshot(m map[string]any) *fault {
	if !s.started {
		return bad(beforeStart)
	}
	if !s.paused {
		return bad("Create snapshot error: the microVM must be paused; it is Running.")
	}
	if t := str(m, "snapshot_type"); t == "Diff" {
		return bad("Create snapshot error: diff snapshots need track_dirty_pages, which was not enabled.")
	}
	vm := s.vm
	if s.hooks.Save != nil {
		vm.Guest = s.hooks.Save()
	}
	state, _ := json.Marshal(snapshotFile{Version: s.version, VM: vm})
	if err := s.writeNew(str(m, "snapshot_path"), state, 0); err != nil {
		return bad("Create snapshot error: cannot write the microVM state: %v", err)
	}
	if err := s.writeNew(str(m, "mem_file_path"), nil, int64(vm.MemMiB)<<20); err != nil {
		return bad("Create snapshot error: cannot write the guest memory: %v", err)
	}
	// The vsock device resets its transport: every connection ends.
	if vm.Muxer != nil {
		vm.Muxer.Reset()
	}
	return nil
}

func (s *Server) loadSnapshot(m map[string]any) *fault {
	if s.started || s.bootConfig {
		return bad("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
	}
	mb, _ := m["mem_backend"].(map[string]any)
	memPath := str(m, "mem_file_path")
	if (mb == nil) == (memPath == "") {
		return bad("Load snapshot error: exactly one of mem_file_path and mem_backend must be given.")
	}
	if mb != nil {
		if str(mb, "backend_type") != "File" {
			return bad("This fake does not emulate the %s memory backend.", str(mb, "backend_type"))
		}
		memPath = str(mb, "backend_path")
	}
	if f := s.needFile(str(m, "snapshot_path"), false, "Load snapshot error: cannot open the microVM state"); f != nil {
		return f
	}
	if f := s.needFile(memPath, false, "Load snapshot error: cannot open the memory file"); f != nil {
		return f
	}
	b, err := os.ReadFile(s.resolve(str(m, "snapshot_path")))
	var snap snapshotFile
	if err == nil {
		err = json.Unmarshal(b, &snap)
	}
	if err != nil {
		return bad("Load snapshot error: the microVM state does not decode: %v", err)
	}
	if snap.Version != s.version {
		return bad("Load snapshot error: the snapshot was made by Firecracker %s, this is %s.", snap.Version, s.version)
	}
	if st, err := os.Stat(s.resolve(memPath)); err != nil || st.Size() != int64(snap.VM.MemMiB)<<20 {
		return bad("Load snapshot error: the memory file does not hold %d MiB.", snap.VM.MemMiB)
	}
	for _, d := range snap.VM.Drives {
		if f := s.needFile(d.Path, !d.ReadOnly, "Load snapshot error: cannot restore drive "+d.ID); f != nil {
			return f
		}
	}
	vm := snap.VM
	if vm.Vsock != nil {
		mux, err := NewMuxer(s.resolve(vm.Vsock.UDS))
		if err != nil {
			return bad("Load snapshot error: cannot restore the vsock device: %v", err)
		}
		s.chown(s.resolve(vm.Vsock.UDS))
		vm.Muxer = mux
	}
	s.vm, s.started, s.paused = vm, true, true
	if s.hooks.Restore != nil {
		s.hooks.Restore(&s.vm)
	}
	if m["resume_vm"] == true {
		return s.patchVM("Resumed")
	}
	return nil
}

// resolve maps a path of the jailed process to the host.
func (s *Server) resolve(p string) string {
	return filepath.Join(s.root, filepath.Clean("/"+p))
}

// needFile checks that the jailed process could open p (for writing too
// when write is set).
func (s *Server) needFile(p string, write bool, what string) *fault {
	if p == "" {
		return bad("%s: empty path.", what)
	}
	st, err := os.Stat(s.resolve(p))
	if err != nil {
		return bad("%s: %s: No such file or directory (os error 2)", what, p)
	}
	if !s.as.Set {
		return nil
	}
	sys := st.Sys().(*syscall.Stat_t)
	mode := st.Mode().Perm()
	var bits os.FileMode
	switch {
	case int(sys.Uid) == s.as.UID:
		bits = mode >> 6
	case int(sys.Gid) == s.as.GID:
		bits = mode >> 3
	default:
		bits = mode
	}
	if bits&4 == 0 || write && bits&2 == 0 {
		return bad("%s: %s: Permission denied (os error 13) for uid %d (owner %d, mode %v)", what, p, s.as.UID, sys.Uid, mode)
	}
	return nil
}

// writeNew creates p in the jail as the jailed user (size > 0: sparse).
func (s *Server) writeNew(p string, data []byte, size int64) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	host := s.resolve(p)
	f, err := os.OpenFile(host, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if size > 0 {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return err
		}
	}
	s.chown(host)
	return f.Close()
}

func (s *Server) chown(host string) {
	if s.as.Set {
		os.Lchown(host, s.as.UID, s.as.GID) // the fake runs as root when it emulates a jail user
	}
}

func str(m map[string]any, k string) string {
	v, _ := m[k].(string)
	return v
}

func num(m map[string]any, k string) int {
	v, _ := m[k].(float64)
	return int(v)
}
