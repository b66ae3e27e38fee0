// Package launch is the boundary hosted agent CLIs (Claude Code, Codex,
// pi, anything) are started through: a launch contract derived before the
// spawn from a profile (data, never a branch on a CLI's name), the
// operator's explicit grants and the neuron's policy; and a receipt of
// what ran, under what, and how it ended.
package launch

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/tools/redact"
)

// IO modes.
const (
	IOPty   = "pty"   // on a pseudo-terminal (TUIs that refuse to run without one)
	IOStdio = "stdio" // pipes, stdin closed (headless modes never wait for input)
)

// Profile says how a kind of program is launched. Profiles are data: the
// embedded ones (profiles/*.json) and the operator's own in
// <home>/profiles/*.json, which replace an embedded one of the same name.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// IO is the default of --pty/--stdio.
	IO string `json:"io"`
	// Env is set in the program's environment (non-secret settings).
	Env map[string]string `json:"env"`
	// Secrets are the environment names the program reads credentials
	// from. They are never passed unless the operator names them with
	// --pass-env; a launch without any says which it could take.
	Secrets []string `json:"secrets"`
	// Network lists host:port destinations the program needs; a launch in
	// a neuron whose policy cannot reach them fails before the spawn.
	Network []string `json:"network"`
	// InnerSandbox says what becomes of the program's own sandbox: "off"
	// (the neuron is the boundary), "none" (it has none), or "nested"
	// (it runs one, which needs nested user namespaces).
	InnerSandbox string `json:"innerSandbox"`
	Notes        string `json:"notes"`
}

//go:embed profiles/*.json
var embedded embed.FS

// Profiles returns the profiles known: the embedded ones, replaced or
// added to by the JSON files in dir (which may not exist).
func Profiles(dir string) ([]*Profile, error) {
	byName := map[string]*Profile{}
	load := func(fsys fs.FS, root string) error {
		ents, err := fs.ReadDir(fsys, root)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := fs.ReadFile(fsys, path.Join(root, e.Name()))
			if err != nil {
				return err
			}
			p, err := parseProfile(b)
			if err != nil {
				return fmt.Errorf("profile %s: %w", filepath.Join(root, e.Name()), err)
			}
			byName[p.Name] = p
		}
		return nil
	}
	if err := load(embedded, "profiles"); err != nil {
		return nil, err
	}
	if dir != "" {
		if err := load(os.DirFS(dir), "."); err != nil {
			return nil, err
		}
	}
	out := make([]*Profile, 0, len(byName))
	for _, p := range byName {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func parseProfile(b []byte) (*Profile, error) {
	var p Profile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	switch {
	case p.Name == "":
		return nil, fmt.Errorf("no name")
	case p.IO != IOPty && p.IO != IOStdio:
		return nil, fmt.Errorf("io %q: give pty or stdio", p.IO)
	case p.InnerSandbox != "off" && p.InnerSandbox != "none" && p.InnerSandbox != "nested":
		return nil, fmt.Errorf("innerSandbox %q: give off, none or nested", p.InnerSandbox)
	}
	for k := range p.Env {
		if !protocol.ValidEnvName(k) {
			return nil, fmt.Errorf("env name %q is not a valid variable name", k)
		}
	}
	return &p, nil
}

// Find returns the profile named name.
func Find(dir, name string) (*Profile, error) {
	all, err := Profiles(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range all {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("no launch profile %q (there are: %s; add your own as %s)",
		name, strings.Join(names, ", "), filepath.Join(dir, name+".json"))}
}

// Request is what the operator asked for.
type Request struct {
	Profile *Profile
	// IO overrides the profile's (pty or stdio; "" keeps it).
	IO   string
	Argv []string
	Cwd  string
	// PassEnv names variables of the operator's environment to pass in.
	PassEnv []string
	// Lookup reads the operator's environment (os.LookupEnv).
	Lookup func(string) (string, bool)
}

// Contract is the launch, derived before the spawn.
type Contract struct {
	IO   string
	Argv []string
	Cwd  string
	// Env is what the program gets on top of the neuron's own (cleared)
	// environment: the profile's settings and the variables passed.
	Env []string
	// Passed are the names given with --pass-env.
	Passed []string
	// Proxied are the neuron's secrets (create --secret): the program
	// finds a placeholder under each name, and the egress proxy puts the
	// value into its HTTPS requests to the secret's hosts.
	Proxied []string
}

// Redactor masks, in what is recorded of the launch, the values passed
// with --pass-env and whatever looks like a credential, each mask with a
// hash prefix of what it hides.
func (c *Contract) Redactor() *redact.Redactor {
	r := redact.NewHashing()
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(c.Passed, k) && len(v) >= redact.MinSecretLen {
			r.AddSecret(k, v) // a name --pass-env checked; shorter values are left (they would mask ordinary words)
		}
	}
	return r
}

// Plan derives the contract, or says why the launch may not happen: an
// empty argv, a variable to pass that is not set, a destination the
// profile needs that the neuron's network policy cannot reach.
func Plan(req *Request, st *sandbox.State) (*Contract, error) {
	p := req.Profile
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, &sandbox.InvalidError{Reason: "launch: no program given (nsys-cortex launch ID -- PROGRAM [ARGS...])"}
	}
	c := &Contract{IO: p.IO, Argv: slices.Clone(req.Argv), Cwd: req.Cwd}
	if req.IO != "" {
		if req.IO != IOPty && req.IO != IOStdio {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("launch: io %q: give pty or stdio", req.IO)}
		}
		c.IO = req.IO
	}
	names := make([]string, 0, len(p.Env))
	for k := range p.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		c.Env = append(c.Env, k+"="+p.Env[k])
	}
	if c.IO == IOPty {
		// The operator's terminal type describes their terminal, which the
		// program draws on; it is part of the contract (and the receipt).
		if t, ok := req.Lookup("TERM"); ok && t != "" && p.Env["TERM"] == "" {
			c.Env = append(c.Env, "TERM="+t)
		}
	}
	if st.Policy != nil {
		c.Proxied = st.Policy.SecretNames()
	}
	for _, name := range req.PassEnv {
		if slices.Contains(c.Proxied, name) {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("--pass-env %s: %s is a secret of neuron %s (create --secret): its placeholder is already there, "+
				"and the egress proxy puts the value in; passing it would put the value inside", name, name, st.ID)}
		}
		if !protocol.ValidEnvName(name) {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("--pass-env %q: give a variable name, not a value (the value is read from your environment)", name)}
		}
		v, ok := req.Lookup(name)
		if !ok {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("--pass-env %s: %s is not set in your environment", name, name)}
		}
		c.Env = append(c.Env, name+"="+v)
		c.Passed = append(c.Passed, name)
	}
	if err := reachable(p, st); err != nil {
		return nil, err
	}
	if p.InnerSandbox == "nested" && (st.Policy == nil || !st.Policy.NestedUserns) {
		return nil, &sandbox.UnenforceableError{Mode: st.Mode, Policy: "the " + p.Name + " profile's inner sandbox",
			Reason: fmt.Sprintf("it runs a sandbox of its own, which needs nested user namespaces, and neuron %s denies them; nothing was started. "+
				"Create the neuron with --nested-userns (nsbox), or use a profile whose inner sandbox is off (the neuron is then the boundary)", st.ID)}
	}
	return c, nil
}

// reachable fails when the neuron's network policy cannot reach what the
// profile needs.
func reachable(p *Profile, st *sandbox.State) error {
	if len(p.Network) == 0 {
		return nil
	}
	pol := sandbox.Network{Mode: sandbox.NetworkNone}
	if st.Policy != nil {
		pol = st.Policy.Network
	}
	var missing []string
	for _, need := range p.Network {
		if !allows(pol, need) {
			missing = append(missing, need)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hosts := make([]string, len(missing))
	for i, m := range missing {
		h, _, _ := strings.Cut(m, ":")
		hosts[i] = "--allow " + h
	}
	return &sandbox.UnenforceableError{Mode: st.Mode, Policy: "the " + p.Name + " profile's network",
		Reason: fmt.Sprintf("it needs %s, which neuron %s's network (%s) does not reach; nothing was started. Create the neuron with %s",
			strings.Join(missing, ", "), st.ID, describe(pol), strings.Join(hosts, " "))}
}

func describe(n sandbox.Network) string {
	switch n.Mode {
	case sandbox.NetworkEgress:
		return "egress to " + strings.Join(n.Allow, ", ")
	case sandbox.NetworkDefault:
		return "none"
	}
	return string(n.Mode)
}

// allows reports whether policy n reaches host:port need.
func allows(n sandbox.Network, need string) bool {
	switch n.Mode {
	case sandbox.NetworkFull:
		return true
	case sandbox.NetworkEgress:
	default:
		return false
	}
	host, port, _ := strings.Cut(need, ":")
	for _, rule := range n.Allow {
		rh, rp, hasPort := strings.Cut(rule, ":")
		if hasPort && rp != port {
			continue
		}
		if rh == host || strings.HasPrefix(rh, "*.") && strings.HasSuffix(host, rh[1:]) {
			return true
		}
	}
	return false
}
