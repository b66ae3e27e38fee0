// Package policy decides whether a tool call made by an agent inside a neuron
// may run: allow, ask a human, or deny.
//
// A Policy is data (JSON, or one of the embedded presets "readonly",
// "standard" and "trusted"). Check takes a Request describing one tool call —
// its tool and group, the paths it touches, the shell source it runs — and
// returns the most severe Decision of every check it made; Explain returns
// every check as well, for `nsys-cortex policy explain`.
//
// Shell commands are parsed with mvdan.cc/sh and every simple command is
// checked, including those inside substitutions, control structures,
// function bodies and well-known wrappers (sudo, env, timeout, bash -c,
// eval, xargs, find -exec, ...). The words of a command meet the path
// rules as the paths they may name: relative ones in the working
// directory the text leaves the shell in (cwd.go), globs and run-time
// parts as patterns (pathpat.go).
//
// The package must not touch the filesystem of a neuron, run anything, or
// resolve symlinks: callers pass absolute, resolved paths. It is a guard rail
// on what an agent asks for, not a sandbox; a script file or an interpreter
// (python -c, make, a compiled binary) does things no policy on shell text can
// see, which is what the neuron's isolation is for.
package policy
