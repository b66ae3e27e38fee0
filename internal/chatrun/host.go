package chatrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/providers"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/prompt"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/memory"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
)

// Host is what Runners work with: the neurons, the home directory, and
// what every tool kit is built with. One Host serves any number of
// Runners; it is not changed after the first Open.
type Host struct {
	Set    *sandbox.Set
	Layout layout.Layout
	// Ensure returns the id of neuron id once it runs, creating or starting
	// it when it does not (a new neuron when id is ""). It chooses the
	// mode; Runners never do.
	Ensure func(ctx context.Context, id string) (string, error)
	// Policy judges every tool call (nil: the standard preset).
	Policy *policy.Policy
	// Redactor masks secrets in tool results before the model or a session
	// sees them (nil: known credential patterns only).
	Redactor *redact.Redactor
	// Audit records every policy decision (nil: none).
	Audit tools.Auditor
	// Providers builds a provider from configuration (nil: providers.New).
	Providers func(llm.Config) (llm.Provider, error)
}

func (h *Host) provider(cfg llm.Config) (llm.Provider, error) {
	if h.Providers != nil {
		return h.Providers(cfg)
	}
	return providers.New(cfg)
}

func (h *Host) check() error {
	switch {
	case h == nil || h.Set == nil:
		return errors.New("chatrun: the host has no sandbox set")
	case h.Layout.Home == "":
		return errors.New("chatrun: the host has no home directory")
	case h.Ensure == nil:
		return errors.New("chatrun: the host cannot start neurons (Ensure is nil)")
	}
	return nil
}

var agentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckAgent fails for an agent name that is not a safe file name (it
// names the memory store and the directory of the agent's prompt files).
func CheckAgent(name string) error {
	if name != "" && !agentName.MatchString(name) {
		return fmt.Errorf("agent name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// memories opens each agent's memory store once and closes them all.
type memories struct {
	mu     sync.Mutex
	stores map[string]*memory.Store
	closed bool
}

func (m *memories) open(path string) func() (*memory.Store, error) {
	return func() (*memory.Store, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed {
			return nil, errors.New("the chat is closed")
		}
		if s := m.stores[path]; s != nil {
			return s, nil
		}
		s, err := memory.Open(path)
		if err != nil {
			return nil, err
		}
		if m.stores == nil {
			m.stores = map[string]*memory.Store{}
		}
		m.stores[path] = s
		return s, nil
	}
}

func (m *memories) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	var errs []error
	for _, s := range m.stores {
		errs = append(errs, s.Close())
	}
	m.stores = nil
	return errors.Join(errs...)
}

// newKit builds the tool kit over neuron n for agent (memory and audit
// facts; "" is the neuron's id), with the extra tools added.
func (h *Host) newKit(n *tools.SetNeuron, agent string, mem *memories, extra []*tools.Tool) (*tools.Kit, error) {
	if agent == "" {
		agent = n.ID()
	}
	opts := []tools.Option{
		tools.WithAgent(agent),
		tools.WithMemory(mem.open(filepath.Join(h.Layout.Home, "memory", agent+".db"))),
	}
	if h.Policy != nil {
		opts = append(opts, tools.WithPolicy(h.Policy))
	}
	if h.Redactor != nil {
		opts = append(opts, tools.WithRedactor(h.Redactor))
	}
	if h.Audit != nil {
		opts = append(opts, tools.WithAudit(h.Audit))
	}
	kit, err := tools.New(n, opts...)
	if err != nil {
		return nil, err
	}
	for _, t := range extra {
		if err := kit.Add(t); err != nil {
			return nil, err
		}
	}
	return kit, nil
}

// systemPrompt builds the system prompt from the agent's files (global,
// then the neuron's workdir), the kit's tools and the neuron's facts.
func (h *Host) systemPrompt(ctx context.Context, n *tools.SetNeuron, kit *tools.Kit, agent string) (string, error) {
	st, err := n.State(ctx)
	if err != nil {
		return "", err
	}
	if agent == "" {
		agent = "default"
	}
	var list []prompt.Tool
	for _, t := range kit.Tools() {
		list = append(list, prompt.Tool{Name: t.Name, Description: t.Description})
	}
	return prompt.Build(ctx, prompt.Options{
		GlobalDir: filepath.Join(h.Layout.Home, "agents", agent),
		Workspace: func(ctx context.Context, name string) ([]byte, error) {
			cl, err := n.Client(ctx)
			if err != nil {
				return nil, err
			}
			data, err := cl.ReadFile(ctx, path.Join(st.Workdir, name))
			if errdefs.IsNotFound(err) {
				return nil, fs.ErrNotExist
			}
			return data, err
		},
		Tools: list,
		Facts: facts(st, kit.Policy().Name),
	})
}

// facts are what the system prompt says about the neuron.
func facts(st *sandbox.State, policyName string) prompt.Facts {
	f := prompt.Facts{Neuron: st.ID, Mode: st.Mode, Workdir: st.Workdir, Policy: policyName}
	p := st.Policy
	if p == nil {
		return f
	}
	f.Network = string(p.Network.Mode)
	if f.Network == "" {
		f.Network = "none"
	}
	if len(p.Network.Allow) > 0 {
		f.Network += " (" + strings.Join(p.Network.Allow, ", ") + ")"
	}
	var lim []string
	if p.Limits.MemoryBytes > 0 {
		lim = append(lim, fmt.Sprintf("memory %d MiB", p.Limits.MemoryBytes>>20))
	}
	if p.Limits.Pids > 0 {
		lim = append(lim, fmt.Sprintf("%d processes", p.Limits.Pids))
	}
	if p.Limits.CPUs > 0 {
		lim = append(lim, fmt.Sprintf("%.1f CPUs", p.Limits.CPUs))
	}
	f.Limits = strings.Join(lim, ", ")
	return f
}
