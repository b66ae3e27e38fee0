package process_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// TestSecretsUnenforceable: process mode has no egress proxy to put a
// secret in, so a create with one fails loudly, naming why, and starts
// nothing (a mode that cannot keep a secret out must not be handed one).
func TestSecretsUnenforceable(t *testing.T) {
	m, _ := newManager(t)
	opts := sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"api.example.com"}},
		Secrets: []sandbox.Secret{{Name: "K", Value: "v", Hosts: []string{"api.example.com"}}}}
	_, err := m.Create(t.Context(), "s1", opts)
	var ue *sandbox.UnenforceableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "secrets") {
		t.Fatalf("create with a secret in process mode: %v", err)
	}
	if list, _ := m.List(t.Context()); len(list) != 0 {
		t.Errorf("a neuron was made: %v", list)
	}
}
