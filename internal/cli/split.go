package cli

import "context"

// The commands below need the heavy parts of Cortex: the LLM vendors'
// SDKs and the chat's renderer, the HTTP API with its metrics, MCP, FUSE
// and SQLite; export and import, the archives' compression (zstd, whose
// tables alone cost a command 0.2-0.3 ms of initialisation). Go
// initialises every package a program links before main runs, so a
// program that links them pays for them on every command (about 40 ms
// here). `make build` therefore makes nsys-cortex of two programs in one
// file: the light one, which runs every other command and starts in about
// a millisecond, and the full one, which it carries compressed and runs
// for these (docs/decisions.md, "One file, two programs").
// A plain `go build` links everything into one program, as before.
//
// The full program's commands take their one-line help from here, so the
// light program's list of commands says the same.
const (
	shortChat     = "Talk to an LLM agent that works in a neuron with the tool kit"
	shortServe    = "Serve the HTTP API (default 127.0.0.1:3100)"
	shortMount    = "Serve the cortex as files at DIR (default /ctx) until stopped"
	shortUmount   = "Unmount the cortex's files at DIR (default /ctx)"
	shortMCP      = "Serve the tool kit of a neuron over MCP (stdio, or streamable HTTP)"
	shortPolicy   = "Inspect tool policies: presets, rule files, decisions"
	shortTools    = "List the tool kit, or call one tool on a neuron"
	shortSnapshot = "Save a neuron and bring it back: create, list, restore, rm"
	shortExport   = "Write a neuron as one archive (tar + zstd)"
	shortImport   = "Make a neuron from an archive export wrote"
)

// passThrough, set by the light build, runs the full program for the
// requests that need its command tree before cobra sees them (help and
// completion of its commands); it returns only when it does not.
var passThrough func(a *App, ctx context.Context, args []string) error

// What the light program's stand-in for kube mode needs to know of it
// without linking it (split_light.go): kube.EnvImage, the variable that
// turns the mode on, and kube.NotConfigured (a test holds them equal).
const (
	kubeImageEnv      = "NSYS_CORTEX_KUBE_IMAGE"
	kubeNotConfigured = "not configured: set kube.image to the neuron image the cluster pulls, and kube.namespace (docs/kube.md)"
)
