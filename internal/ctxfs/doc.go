// Package ctxfs is /ctx: the cortex projected as a FUSE filesystem, Plan 9
// style. Every neuron, process, terminal, receipt, session and agent is a
// directory a person or an agent can ls, cat, tail -f and echo verbs into
// (docs/ctx.md has the tree and the verbs).
//
// ctxfs is a projection only. It imports foundation packages (protocol)
// and go-fuse, and reads the system through the small interfaces it
// declares in source.go (Source, Channel, Controller, Records, Auditor);
// the adapter over the real system (internal/ctxsource) lives outside, so
// that nothing here can reach a sandbox backend, the channel or an LLM.
//
// The tree is one path-addressed Tree, served two ways: as an io/fs.FS
// (FS, tested with testing/fstest before anything is mounted) and as a
// go-fuse filesystem (Mount). Generated files are served with direct I/O
// from bytes the model precomputed; growing files (process output,
// terminal replay, transcripts, the audit log) report their current size
// and notify the kernel when they grow, so tail -f follows them.
//
// What it must not do: touch its own mount from the serving process, bind
// backing storage writable, or let a neuron's uid see another neuron.
package ctxfs
