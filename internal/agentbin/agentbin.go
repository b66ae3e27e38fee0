// Package agentbin carries the cortex-agent binary inside nsys-cortex when
// the build embeds it (make build does: it builds the agent, copies it here
// as cortex-agent.bin, and builds nsys-cortex with -tags cortex_embed_agent).
// A plain `go build` embeds nothing and the host looks for the agent beside
// its executable or at NSYS_CORTEX_AGENT_BIN.
package agentbin

var embedded []byte

// Embedded returns the agent binary built into this executable, or nil.
func Embedded() []byte { return embedded }
