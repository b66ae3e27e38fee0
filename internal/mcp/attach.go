package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// ServerConfig describes an external MCP server started over stdio.
type ServerConfig struct {
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Env names variables of the operator's environment passed through;
	// nothing else of it reaches the server (but PATH, HOME, LANG, TMPDIR).
	Env []string `json:"env,omitempty"`
	// SetEnv sets variables to fixed values.
	SetEnv map[string]string `json:"setEnv,omitempty"`
	Dir    string            `json:"dir,omitempty"`
	// Tools, when given, is the only tools of the server offered.
	Tools []string `json:"tools,omitempty"`
}

// Config is the attached servers, by name (the file mcp.json in the home).
type Config struct {
	Servers map[string]ServerConfig `json:"servers"`
}

// serverName is what an attached server may be called: it becomes part of
// its tools' names (mcp__NAME__tool).
var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// LoadConfig reads the attached servers from path; a missing file is none.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c Config
	d := json.NewDecoder(strings.NewReader(string(data)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for name, s := range c.Servers {
		if !serverName.MatchString(name) || strings.Contains(name, "__") {
			return nil, fmt.Errorf("%s: server name %q: use 1-32 letters, digits, '_' or '-' (no '__')", path, name)
		}
		if s.Command == "" {
			return nil, fmt.Errorf("%s: server %q: command is empty", path, name)
		}
		for _, e := range s.Env {
			if e == "" || strings.ContainsAny(e, "=\x00") {
				return nil, fmt.Errorf("%s: server %q: env entry %q is not a variable name", path, name, e)
			}
		}
	}
	return &Config{Servers: c.Servers}, nil
}

// Attached is one external server whose tools are in a kit. The server
// starts on the first call of one of its tools (its tool list is cached
// from an earlier start), and stops on Close.
type Attached struct {
	name  string
	cfg   ServerConfig
	cache string

	mu      sync.Mutex
	session *sdk.ClientSession
	started bool
}

// cachedTools is what is kept of a server's tool list between runs.
type cachedTools struct {
	ConfigHash string      `json:"configHash"`
	Tools      []*sdk.Tool `json:"tools"`
}

// Attach adds the tools of server name to kit as mcp__NAME__TOOL, in the
// "mcp" group. cacheDir keeps the tool lists so a later Attach starts
// nothing until a tool is called.
func Attach(ctx context.Context, kit *tools.Kit, name string, cfg ServerConfig, cacheDir string) (*Attached, error) {
	a := &Attached{name: name, cfg: cfg, cache: filepath.Join(cacheDir, name+".tools.json")}
	att, err := a.attach(ctx, kit)
	if err != nil {
		a.Close() // a server started to list its tools must not outlive the failure
		return nil, err
	}
	return att, nil
}

func (a *Attached) attach(ctx context.Context, kit *tools.Kit) (*Attached, error) {
	name, cfg := a.name, a.cfg
	list, err := a.toolList(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range list {
		if len(cfg.Tools) > 0 && !slices.Contains(cfg.Tools, t.Name) {
			continue
		}
		schema, err := toSchema(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("mcp server %s: tool %s: %w", name, t.Name, err)
		}
		ann := tools.Annotations{OpenWorld: true, Destructive: true}
		if h := t.Annotations; h != nil {
			ann.ReadOnly, ann.Idempotent = h.ReadOnlyHint, h.IdempotentHint
			ann.Destructive = h.DestructiveHint == nil || *h.DestructiveHint
			ann.OpenWorld = h.OpenWorldHint == nil || *h.OpenWorldHint
		}
		remote := t.Name
		kt, err := tools.External(fmt.Sprintf("mcp__%s__%s", name, remote), fmt.Sprintf("[%s] %s", name, t.Description),
			tools.GroupMCP, ann, schema, func(ctx context.Context, in json.RawMessage) (*tools.Result, error) {
				return a.call(ctx, remote, in)
			})
		if err != nil {
			return nil, fmt.Errorf("mcp server %s: %w", name, err)
		}
		if err := kit.Add(kt); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// toolList returns the server's tools from the cache, or by starting it.
func (a *Attached) toolList(ctx context.Context) ([]*sdk.Tool, error) {
	hash := a.configHash()
	var c cachedTools
	if err := store.ReadJSON(a.cache, &c); err == nil && c.ConfigHash == hash {
		return c.Tools, nil
	}
	s, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	var list []*sdk.Tool
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcp server %s: list tools: %w", a.name, err)
		}
		list = append(list, t)
	}
	if err := os.MkdirAll(filepath.Dir(a.cache), 0o700); err == nil {
		_ = store.WriteJSON(a.cache, &cachedTools{ConfigHash: hash, Tools: list}, 0o600) // a cache: failing to write it only costs a start next time
	}
	return list, nil
}

func (a *Attached) configHash() string {
	b, _ := json.Marshal(a.cfg)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// connect starts the server (once) and returns its session.
func (a *Attached) connect(ctx context.Context) (*sdk.ClientSession, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session != nil {
		return a.session, nil
	}
	cmd := exec.Command(a.cfg.Command, a.cfg.Args...)
	cmd.Env = curatedEnv(a.cfg)
	cmd.Dir = a.cfg.Dir
	cmd.Stderr = os.Stderr // the server's diagnostics go where ours go
	client := sdk.NewClient(&sdk.Implementation{Name: ServerName, Version: "attach"}, nil)
	s, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: start %s: %w", a.name, a.cfg.Command, err)
	}
	a.session, a.started = s, true
	return s, nil
}

// Started reports whether the server process was ever started.
func (a *Attached) Started() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.started
}

// call forwards one tool call.
func (a *Attached) call(ctx context.Context, name string, in json.RawMessage) (*tools.Result, error) {
	s, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	var args any = map[string]any{}
	if len(in) > 0 {
		args = in
	}
	r, err := s.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: %s: %w", a.name, name, err)
	}
	var b strings.Builder
	for i, c := range r.Content {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch c := c.(type) {
		case *sdk.TextContent:
			b.WriteString(c.Text)
		case *sdk.ImageContent:
			fmt.Fprintf(&b, "[image %s, %d bytes]", c.MIMEType, len(c.Data))
		case *sdk.AudioContent:
			fmt.Fprintf(&b, "[audio %s, %d bytes]", c.MIMEType, len(c.Data))
		default:
			data, _ := json.Marshal(c)
			b.Write(data)
		}
	}
	if b.Len() == 0 && r.StructuredContent != nil {
		data, _ := json.Marshal(r.StructuredContent)
		b.Write(data)
	}
	return &tools.Result{Text: b.String(), IsError: r.IsError}, nil
}

// Close stops the server, if it was started.
func (a *Attached) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session == nil {
		return nil
	}
	err := a.session.Close()
	a.session = nil
	return err
}

// curatedEnv is the server's whole environment: a few neutral variables
// and what the operator named.
func curatedEnv(cfg ServerConfig) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range cfg.Env {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(cfg.SetEnv))
	for k := range cfg.SetEnv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+cfg.SetEnv[k])
	}
	return env
}

// toSchema converts a tool's input schema as the client decoded it.
func toSchema(v any) (*jsonschema.Schema, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return &s, nil
}
