package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// The request and response bodies of the Firecracker API this backend uses,
// field for field as testdata/firecracker.yaml (the pinned release's
// swagger) defines them. A field without omitempty is one the API
// requires, or one whose zero value means something other than "unset".

// Logger configures Firecracker's own log (PUT /logger).
type Logger struct {
	LogPath       string `json:"log_path,omitempty"`
	Level         string `json:"level,omitempty"` // Error, Warning, Info, Debug, Trace, Off
	ShowLevel     bool   `json:"show_level,omitempty"`
	ShowLogOrigin bool   `json:"show_log_origin,omitempty"`
	Module        string `json:"module,omitempty"`
}

// Metrics configures where Firecracker flushes its metrics (PUT /metrics).
type Metrics struct {
	MetricsPath string `json:"metrics_path"`
}

// MachineConfig is the VM's shape (PUT /machine-config).
type MachineConfig struct {
	VCPUCount       int    `json:"vcpu_count"`
	MemSizeMiB      int    `json:"mem_size_mib"`
	SMT             bool   `json:"smt,omitempty"`
	TrackDirtyPages bool   `json:"track_dirty_pages,omitempty"`
	CPUTemplate     string `json:"cpu_template,omitempty"`
	HugePages       string `json:"huge_pages,omitempty"`
}

// BootSource is the kernel, initrd and command line (PUT /boot-source).
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path,omitempty"`
	BootArgs        string `json:"boot_args,omitempty"`
}

// Drive is a virtio block device (PUT /drives/{drive_id}).
type Drive struct {
	DriveID      string       `json:"drive_id"`
	PathOnHost   string       `json:"path_on_host"`
	IsRootDevice bool         `json:"is_root_device"`
	IsReadOnly   bool         `json:"is_read_only"`
	PartUUID     string       `json:"partuuid,omitempty"`
	CacheType    string       `json:"cache_type,omitempty"` // Unsafe (default), Writeback
	IOEngine     string       `json:"io_engine,omitempty"`  // Sync (default), Async
	RateLimiter  *RateLimiter `json:"rate_limiter,omitempty"`
}

// NetworkInterface is a virtio-net device on a host tap
// (PUT /network-interfaces/{iface_id}). Neurons get none today: see
// docs/firecracker.md, Network.
type NetworkInterface struct {
	IfaceID       string       `json:"iface_id"`
	HostDevName   string       `json:"host_dev_name"`
	GuestMAC      string       `json:"guest_mac,omitempty"`
	RxRateLimiter *RateLimiter `json:"rx_rate_limiter,omitempty"`
	TxRateLimiter *RateLimiter `json:"tx_rate_limiter,omitempty"`
}

// RateLimiter bounds a device's bandwidth and operations.
type RateLimiter struct {
	Bandwidth *TokenBucket `json:"bandwidth,omitempty"`
	Ops       *TokenBucket `json:"ops,omitempty"`
}

// TokenBucket is one limit of a RateLimiter.
type TokenBucket struct {
	Size         int64 `json:"size"`
	RefillTime   int64 `json:"refill_time"` // milliseconds
	OneTimeBurst int64 `json:"one_time_burst,omitempty"`
}

// Vsock is the hybrid vsock device (PUT /vsock).
type Vsock struct {
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// Balloon is the memory balloon device (PUT /balloon).
type Balloon struct {
	AmountMiB             int  `json:"amount_mib"`
	DeflateOnOOM          bool `json:"deflate_on_oom"`
	StatsPollingIntervalS int  `json:"stats_polling_interval_s,omitempty"`
}

// ActionType names a synchronous action (PUT /actions).
type ActionType string

// Actions.
const (
	ActionInstanceStart  ActionType = "InstanceStart"
	ActionFlushMetrics   ActionType = "FlushMetrics"
	ActionSendCtrlAltDel ActionType = "SendCtrlAltDel"
)

type instanceAction struct {
	ActionType ActionType `json:"action_type"`
}

// VMState is what PATCH /vm sets.
type VMState string

// VM states.
const (
	VMPaused  VMState = "Paused"
	VMResumed VMState = "Resumed"
)

type vmPatch struct {
	State VMState `json:"state"`
}

// SnapshotCreate asks for a snapshot of a paused VM (PUT /snapshot/create).
type SnapshotCreate struct {
	SnapshotType string `json:"snapshot_type,omitempty"` // Full (default), Diff
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
}

// SnapshotLoad loads a snapshot into a fresh process (PUT /snapshot/load).
type SnapshotLoad struct {
	SnapshotPath        string         `json:"snapshot_path"`
	MemBackend          *MemoryBackend `json:"mem_backend,omitempty"`
	EnableDiffSnapshots bool           `json:"enable_diff_snapshots,omitempty"`
	ResumeVM            bool           `json:"resume_vm,omitempty"`
}

// MemoryBackend says where a snapshot's guest memory comes from.
type MemoryBackend struct {
	BackendType string `json:"backend_type"` // File, Uffd
	BackendPath string `json:"backend_path"`
}

// InstanceInfo is GET /.
type InstanceInfo struct {
	AppName    string `json:"app_name"`
	ID         string `json:"id"`
	State      string `json:"state"` // "Not started", "Running", "Paused"
	VMMVersion string `json:"vmm_version"`
}

// APIError is a request Firecracker refused, with its fault_message.
type APIError struct {
	Method, Path string
	Status       int
	Fault        string
}

func (e *APIError) Error() string {
	if e.Fault == "" {
		return fmt.Sprintf("firecracker API %s %s: HTTP %d", e.Method, e.Path, e.Status)
	}
	return fmt.Sprintf("firecracker API %s %s: %s (HTTP %d)", e.Method, e.Path, e.Fault, e.Status)
}

// Client talks to one Firecracker process over its API socket.
type Client struct {
	sock string
	hc   *http.Client
}

// NewClient returns a client of the API socket at sock (a host path of any
// length).
func NewClient(sock string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return protocol.DialUnix(ctx, sock)
		},
		MaxIdleConns:      1,
		IdleConnTimeout:   30 * time.Second,
		DisableKeepAlives: false,
	}
	return &Client{sock: sock, hc: &http.Client{Transport: tr}}
}

// Close drops the client's idle connection.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Socket returns the API socket's path.
func (c *Client) Socket() string { return c.sock }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: %w", method, path, unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		var fault struct {
			FaultMessage string `json:"fault_message"`
		}
		if json.Unmarshal(data, &fault) == nil {
			e.Fault = fault.FaultMessage
		} else {
			e.Fault = strings.TrimSpace(string(data))
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("firecracker API %s %s: the answer does not decode: %w", method, path, err)
		}
	}
	return nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Describe returns the instance's information (GET /).
func (c *Client) Describe(ctx context.Context) (*InstanceInfo, error) {
	var info InstanceInfo
	return &info, c.do(ctx, http.MethodGet, "/", nil, &info)
}

// PutLogger configures the logger.
func (c *Client) PutLogger(ctx context.Context, l Logger) error {
	return c.do(ctx, http.MethodPut, "/logger", l, nil)
}

// PutMetrics configures the metrics file.
func (c *Client) PutMetrics(ctx context.Context, m Metrics) error {
	return c.do(ctx, http.MethodPut, "/metrics", m, nil)
}

// PutMachineConfig sets the VM's vCPUs and memory.
func (c *Client) PutMachineConfig(ctx context.Context, m MachineConfig) error {
	return c.do(ctx, http.MethodPut, "/machine-config", m, nil)
}

// PutBootSource sets the kernel, initrd and command line.
func (c *Client) PutBootSource(ctx context.Context, b BootSource) error {
	return c.do(ctx, http.MethodPut, "/boot-source", b, nil)
}

// PutDrive adds (or, before boot, replaces) a drive.
func (c *Client) PutDrive(ctx context.Context, d Drive) error {
	if d.DriveID == "" {
		return errors.New("firecracker API: a drive needs an id")
	}
	return c.do(ctx, http.MethodPut, "/drives/"+url.PathEscape(d.DriveID), d, nil)
}

// PutNetworkInterface adds a network interface.
func (c *Client) PutNetworkInterface(ctx context.Context, n NetworkInterface) error {
	if n.IfaceID == "" {
		return errors.New("firecracker API: a network interface needs an id")
	}
	return c.do(ctx, http.MethodPut, "/network-interfaces/"+url.PathEscape(n.IfaceID), n, nil)
}

// PutVsock sets up the hybrid vsock device.
func (c *Client) PutVsock(ctx context.Context, v Vsock) error {
	return c.do(ctx, http.MethodPut, "/vsock", v, nil)
}

// PutBalloon sets up the memory balloon.
func (c *Client) PutBalloon(ctx context.Context, b Balloon) error {
	return c.do(ctx, http.MethodPut, "/balloon", b, nil)
}

// Action runs a synchronous action.
func (c *Client) Action(ctx context.Context, a ActionType) error {
	return c.do(ctx, http.MethodPut, "/actions", instanceAction{ActionType: a}, nil)
}

// PatchVM pauses or resumes the VM.
func (c *Client) PatchVM(ctx context.Context, s VMState) error {
	return c.do(ctx, http.MethodPatch, "/vm", vmPatch{State: s}, nil)
}

// CreateSnapshot writes a snapshot of the paused VM.
func (c *Client) CreateSnapshot(ctx context.Context, s SnapshotCreate) error {
	return c.do(ctx, http.MethodPut, "/snapshot/create", s, nil)
}

// LoadSnapshot loads a snapshot (a fresh process only).
func (c *Client) LoadSnapshot(ctx context.Context, s SnapshotLoad) error {
	return c.do(ctx, http.MethodPut, "/snapshot/load", s, nil)
}
