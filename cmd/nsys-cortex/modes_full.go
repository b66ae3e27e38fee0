//go:build !cortex_light

package main

import (
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
)

// fullModes are the modes only the full program links (the light one has
// stand-ins that run the full program: internal/cli/split_light.go).
func fullModes() []sandbox.Backend { return []sandbox.Backend{kube.Backend()} }

// sharedKeys opens the API keys the replicas of a deployment share
// (kube.api_keys): a Secret, through client-go.
func sharedKeys() func() (apikey.Shared, error) {
	return func() (apikey.Shared, error) {
		s, err := kube.SecretKeysFromEnv()
		if s == nil || err != nil {
			return nil, err
		}
		return s, nil
	}
}
