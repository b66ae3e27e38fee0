//go:build cortex_light

package main

import "github.com/nsys-cortex/cortex/internal/sandbox"

// fullModes: none here; the light program stands in for them
// (internal/cli/split_light.go).
func fullModes() []sandbox.Backend { return nil }
