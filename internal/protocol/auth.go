package protocol

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// The agent proves itself on every connection. The host makes a secret
// each time it starts a neuron (NewSecret) and hands it to the neuron's
// first process outside the neuron's reach: never on its disk, never in
// its environment where a command could read it (docs/security.md). The
// host's hello carries a fresh Nonce; the agent answers with
// AgentProof(secret, neuron, nonce), which the host checks. A process in
// the neuron that stops the real agent and connects in its place cannot
// answer, and a proof seen once is worth nothing on another connection.

// NewSecret returns a fresh per-start secret (32 random bytes, hex).
func NewSecret() string { return random32() }

// NewNonce returns a fresh challenge for one connection.
func NewNonce() string { return random32() }

func random32() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AgentProof is what the agent of neuron answers to nonce when it holds
// secret: HMAC-SHA256 keyed with the secret over a label, the neuron id
// and the nonce, hex.
func AgentProof(secret, neuron, nonce string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("nsys-cortex agent proof v1\x00"))
	m.Write([]byte(neuron))
	m.Write([]byte{0})
	m.Write([]byte(nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckProof reports whether proof answers nonce for neuron and secret
// (in constant time).
func CheckProof(secret, neuron, nonce, proof string) bool {
	want := AgentProof(secret, neuron, nonce)
	return hmac.Equal([]byte(want), []byte(proof))
}
