//go:build cortex_light

package main

import (
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// fullModes: none here; the light program stands in for them
// (internal/cli/split_light.go).
func fullModes() []sandbox.Backend { return nil }

// sharedKeys: none here; the shared API keys (kube.api_keys) are reached
// through client-go, which only the full program links: a command that
// needs them runs it (internal/cli/keys.go).
func sharedKeys() func() (apikey.Shared, error) { return nil }
