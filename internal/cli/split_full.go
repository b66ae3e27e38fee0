//go:build !cortex_light

package cli

import "github.com/nsys-cortex/cortex/internal/sandbox"

// standIns: the full program links every mode it is given (see
// split_light.go).
func (a *App) standIns() []sandbox.Backend { return nil }
