//go:build cortex_embed_agent

package agentbin

import _ "embed"

//go:embed cortex-agent.bin
var data []byte

func init() { embedded = data }
