//go:build cortex_embed_full

package fullbin

import _ "embed"

//go:embed nsys-cortex-full.gz
var data []byte

func init() { embedded = data }
