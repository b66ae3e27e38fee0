// Package prompt builds an agent's system prompt: who it is (SOUL.md), the
// project's instructions (AGENTS.md), notes on its tools (TOOLS.md) — each
// from the operator's agent directory, then from the neuron's workspace —
// followed by the tool list and the facts of the neuron it works in.
package prompt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files are the instruction files, in the order they appear.
var Files = []string{"SOUL.md", "AGENTS.md", "TOOLS.md"}

// MaxFileBytes caps one instruction file in the prompt.
const MaxFileBytes = 64 << 10

// Tool is a tool as the prompt lists it.
type Tool struct{ Name, Description string }

// Facts are what the agent should know of its neuron.
type Facts struct {
	Neuron  string
	Mode    string
	Workdir string
	Network string // none, egress (allow list), full
	Limits  string // e.g. "memory 2 GiB, 256 processes"
	Policy  string // the tool policy's name
}

// Options say where the parts come from.
type Options struct {
	// GlobalDir is the operator's directory for this agent
	// (<home>/agents/<name>); missing files are skipped.
	GlobalDir string
	// Workspace reads a file of the neuron's workdir (nil: none);
	// an error satisfying errors.Is(err, fs.ErrNotExist) means absent.
	Workspace func(ctx context.Context, name string) ([]byte, error)
	Tools     []Tool
	Facts     Facts
}

const base = `You are a capable software agent working inside a neuron: an isolated Linux environment that is yours. Use the tools to inspect, change and run things in it; everything you change in its files persists. Work step by step, verify your changes (run the tests), and finish with a short summary of what you did.`

// Build returns the system prompt.
func Build(ctx context.Context, o Options) (string, error) {
	var b strings.Builder
	b.WriteString(base)
	b.WriteString("\n")
	for _, name := range Files {
		if o.GlobalDir != "" {
			data, err := os.ReadFile(filepath.Join(o.GlobalDir, name))
			switch {
			case err == nil:
				section(&b, name+" (operator)", data)
			case !errors.Is(err, fs.ErrNotExist):
				return "", fmt.Errorf("prompt: %w", err)
			}
		}
		if o.Workspace != nil {
			data, err := o.Workspace(ctx, name)
			switch {
			case err == nil:
				section(&b, name+" (workspace)", data)
			case !errors.Is(err, fs.ErrNotExist):
				return "", fmt.Errorf("prompt: %s of the workspace: %w", name, err)
			}
		}
	}
	if len(o.Tools) > 0 {
		b.WriteString("\n## Tools\n")
		for _, t := range o.Tools {
			first, _, _ := strings.Cut(t.Description, "\n")
			fmt.Fprintf(&b, "- %s: %s\n", t.Name, first)
		}
	}
	f := o.Facts
	b.WriteString("\n## Your neuron\n")
	for _, kv := range [][2]string{{"id", f.Neuron}, {"isolation", f.Mode}, {"workdir", f.Workdir}, {"network", f.Network}, {"limits", f.Limits}, {"tool policy", f.Policy}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "- %s: %s\n", kv[0], kv[1])
		}
	}
	return b.String(), nil
}

// section appends one instruction file, capped.
func section(b *strings.Builder, title string, data []byte) {
	text := strings.TrimSpace(string(data))
	if text == "" {
		return
	}
	if len(text) > MaxFileBytes {
		text = text[:MaxFileBytes] + fmt.Sprintf("\n[… cut: the file is %d bytes, the prompt keeps %d]", len(data), MaxFileBytes)
	}
	fmt.Fprintf(b, "\n## %s\n%s\n", title, text)
}
