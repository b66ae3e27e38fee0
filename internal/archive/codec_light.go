//go:build cortex_light

package archive

import "io"

// The light build of nsys-cortex links no compression (codec.go says
// why): its export and import commands run the full program, so these are
// never reached from them.

func compress(io.Writer) (io.WriteCloser, error) { return nil, errNotLinked }
func decompress(io.Reader) (decompressor, error) { return nil, errNotLinked }
func notCompressed(error) bool                   { return false }
