//go:build !cortex_light

package main

import (
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
)

// fullModes are the modes only the full program links (the light one has
// stand-ins that run the full program: internal/cli/split_light.go).
func fullModes() []sandbox.Backend { return []sandbox.Backend{kube.Backend()} }
