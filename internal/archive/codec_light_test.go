//go:build cortex_light

package archive

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// The light build links no compression: its archives say so, and are
// not taken for damaged ones.
func TestLightBuildSaysSo(t *testing.T) {
	var b bytes.Buffer
	if _, err := Write(context.Background(), &b, Record{ID: "x"}, nil); !errors.Is(err, errNotLinked) {
		t.Errorf("Write: %v", err)
	}
	if _, err := Open(bytes.NewReader([]byte("(\xb5/\xfd anything"))); !errors.Is(err, errNotLinked) || errors.Is(err, ErrBad) {
		t.Errorf("Open: %v", err)
	}
}
