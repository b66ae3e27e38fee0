//go:build !cortex_light

package cli

import (
	"context"
	"errors"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// standIns: the full program links every mode it is given (see
// split_light.go).
func (a *App) standIns() []sandbox.Backend { return nil }

// handOff: the full program links everything; a part it is not given is
// missing from this build.
func (a *App) handOff(context.Context) error {
	return errors.New("this build of nsys-cortex cannot reach the shared API keys (kube.api_keys)")
}
