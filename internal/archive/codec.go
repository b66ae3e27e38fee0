//go:build !cortex_light

package archive

import (
	"errors"
	"io"

	"github.com/klauspost/compress/zstd"
)

// The archive's compression, zstd. The light build of nsys-cortex
// (internal/cli/split.go) links none of it (codec_light.go): its export
// and import commands run the full program, and the decoder's tables
// cost every other command 0.2–0.3 ms of initialisation.

func compress(w io.Writer) (io.WriteCloser, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
}

func decompress(r io.Reader) (decompressor, error) {
	return zstd.NewReader(r, zstd.WithDecoderMaxMemory(256<<20))
}

// notCompressed says whether err is a stream's first read finding no
// zstd frame.
func notCompressed(err error) bool { return errors.Is(err, zstd.ErrMagicMismatch) }
