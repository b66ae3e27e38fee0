package launch

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
)

// Identity is who the program runs as inside the neuron.
type Identity = protocol.Identity

// Mount is one mount the program sees.
type Mount = protocol.Mount

// Receipt records one launch: what ran, under which boundary, and how it
// ended. Environment values are never recorded, only names.
type Receipt struct {
	ID      string `json:"id"`
	Neuron  string `json:"neuron"`
	Mode    string `json:"mode"`
	Profile string `json:"profile"`
	IO      string `json:"io"`

	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd"`
	// Env names what the launch set (values redacted); Passed the names
	// the operator passed in from their own environment; Proxied the
	// neuron's secrets, which the program held only as placeholders.
	Env     []string `json:"env"`
	Passed  []string `json:"passed,omitempty"`
	Proxied []string `json:"proxied,omitempty"`

	Identity *Identity       `json:"identity,omitempty"`
	Mounts   []Mount         `json:"mounts,omitempty"`
	Network  sandbox.Network `json:"network"`
	Limits   sandbox.Limits  `json:"limits"`
	Image    string          `json:"image,omitempty"`
	// InnerSandbox is the profile's word on the program's own sandbox.
	InnerSandbox string `json:"innerSandbox"`

	Host struct {
		PID  int    `json:"pid"`
		User string `json:"user"`
	} `json:"host"`

	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	Running  bool      `json:"running"`
	ExitCode *int      `json:"exitCode,omitempty"`
	Signal   string    `json:"signal,omitempty"`
	Error    string    `json:"error,omitempty"`

	redact *redact.Redactor // masks what the receipt records (nil: a read receipt)
}

// NewReceipt starts the receipt of contract c in neuron st. The receipt
// holds no secret: environment values are never recorded, and in the
// argv and working directory the values passed with --pass-env and
// whatever looks like a credential are masked, with a hash prefix
// ([REDACTED:NAME sha256:0123abcd]).
func NewReceipt(c *Contract, p *Profile, st *sandbox.State) *Receipt {
	var rnd [4]byte
	rand.Read(rnd[:])
	now := time.Now().UTC()
	r := &Receipt{ID: now.Format("20060102T150405Z") + "-" + hex.EncodeToString(rnd[:]), Neuron: st.ID, Mode: st.Mode,
		Profile: p.Name, IO: c.IO, Passed: c.Passed, Proxied: c.Proxied, InnerSandbox: p.InnerSandbox,
		Started: now, Running: true, redact: c.Redactor()}
	r.Argv = make([]string, len(c.Argv))
	for i, a := range c.Argv {
		r.Argv[i] = r.redact.Redact(a)
	}
	r.Cwd = r.redact.Redact(c.Cwd)
	for _, kv := range c.Env {
		k, _, _ := strings.Cut(kv, "=")
		r.Env = append(r.Env, k)
	}
	if st.Policy != nil {
		r.Network, r.Limits, r.Image = st.Policy.Network, st.Policy.Limits, st.Policy.Image
	}
	r.Host.PID = os.Getpid()
	r.Host.User = strconv.Itoa(os.Getuid()) // the uid, not $USER, which the caller sets
	if u, err := user.LookupId(r.Host.User); err == nil {
		r.Host.User = u.Username + " (" + r.Host.User + ")"
	}
	return r
}

// Observe records what the neuron's agent reports of the identity and
// mounts every command it starts inherits.
func (r *Receipt) Observe(h *protocol.HealthResult) {
	r.Identity = h.Identity
	r.Mounts = slices.Clone(h.Mounts)
	sort.Slice(r.Mounts, func(i, j int) bool { return r.Mounts[i].Target < r.Mounts[j].Target })
	if r.Cwd == "" {
		r.Cwd = r.redact.Redact(h.Workdir)
	}
}

// Finish records how the launch ended.
func (r *Receipt) Finish(code int, signal string, err error) {
	r.Running = false
	r.Ended = time.Now().UTC()
	if err != nil {
		r.Error = err.Error()
		if r.redact != nil {
			r.Error = r.redact.Redact(r.Error)
		}
		return
	}
	r.ExitCode, r.Signal = &code, signal
}

// ReceiptsDir is where neuron st's receipts are kept: beside its data on
// the host, outside anything the neuron can reach. A process-mode neuron
// runs as the operator in a directory of the overlay (it is no boundary),
// so its receipts are kept apart, in the home's receipts/<id>/, out of
// the tree its commands work in.
func ReceiptsDir(lay layout.Layout, st *sandbox.State) string {
	if st.Mode == "process" || st.OverlayPath == "" {
		// Or a neuron whose files are not on this host (kube).
		return filepath.Join(lay.Home, "receipts", st.ID)
	}
	return filepath.Join(st.OverlayPath, "receipts")
}

// Write stores the receipt (atomically: temp file and rename), owner-only.
func (r *Receipt) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, r.ID+".json")
	return path, store.WriteJSON(path, r, 0o600)
}

// Receipts reads a neuron's receipts, oldest first.
func Receipts(dir string) ([]*Receipt, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Receipt
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var r Receipt
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("receipt %s: %w", e.Name(), err)
		}
		out = append(out, &r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
