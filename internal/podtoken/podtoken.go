// Package podtoken is how a kube neuron's agent knows the host that dials
// it (docs/kube.md, "The channel"): the host signs a short-lived token
// with an Ed25519 key of its own, naming the pod it is for (namespace,
// name, uid) and when it expires; the agent verifies it with the public
// key the namespace's trust ConfigMap holds, against its own pod's
// identity from the downward API. A warm pod made before its neuron was
// claimed needs no Secret of its own, and the private key never enters
// the cluster's pods (an HMAC would put the key in every sandbox).
//
// Standard library only: the agent links it.
package podtoken

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Identity is a pod, as a token names it.
type Identity struct {
	Namespace string `json:"ns"`
	Pod       string `json:"pod"`
	UID       string `json:"uid"`
}

// Claims are what a token says: the pod it is for, and until when.
type Claims struct {
	Identity
	// Expiry is when the token stops opening the pod (Unix seconds).
	Expiry int64 `json:"exp"`
	// Issued is when it was made (Unix seconds).
	Issued int64 `json:"iat"`
}

// MaxLifetime bounds a token's life: a token is made for one dial.
const MaxLifetime = 10 * time.Minute

// maxToken bounds a token's length before anything is decoded.
const maxToken = 2048

// keyPrefix begins a public key's text form (the trust ConfigMap's
// value): "ed25519 " and the key in base64.
const keyPrefix = "ed25519 "

// Sign makes a token for id, valid for ttl (at most MaxLifetime).
func Sign(priv ed25519.PrivateKey, id Identity, ttl time.Duration, now time.Time) (string, error) {
	if ttl <= 0 || ttl > MaxLifetime {
		return "", fmt.Errorf("a token lives 1 ns to %v, not %v", MaxLifetime, ttl)
	}
	if id.Namespace == "" || id.Pod == "" || id.UID == "" {
		return "", fmt.Errorf("a token names a pod's namespace, name and uid: %+v", id)
	}
	body, err := json.Marshal(Claims{Identity: id, Expiry: now.Add(ttl).Unix(), Issued: now.Unix()})
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	sig := ed25519.Sign(priv, []byte("nsys-cortex-pod-token\x00"+payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// ErrInvalid is every refusal of a token: the agent closes the
// connection, saying no more.
var ErrInvalid = errors.New("the pod token is not valid")

// Verify checks tok, signed by pub, for the pod self at now: the
// signature, the pod's identity, its expiry and its lifetime.
func Verify(pub ed25519.PublicKey, tok string, self Identity, now time.Time) (Claims, error) {
	var c Claims
	if len(tok) > maxToken || len(pub) != ed25519.PublicKeySize {
		return c, ErrInvalid
	}
	payload, sig64, ok := strings.Cut(tok, ".")
	if !ok {
		return c, ErrInvalid
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(sig64)
	if err != nil || !ed25519.Verify(pub, []byte("nsys-cortex-pod-token\x00"+payload), sig) {
		return c, ErrInvalid
	}
	body, err := base64.RawURLEncoding.Strict().DecodeString(payload)
	if err != nil || json.Unmarshal(body, &c) != nil {
		return c, ErrInvalid
	}
	switch {
	case c.Identity != self || self.UID == "":
		return c, fmt.Errorf("%w: it is for pod %s/%s (%s), this is %s/%s (%s)", ErrInvalid, c.Namespace, c.Pod, c.UID, self.Namespace, self.Pod, self.UID)
	case now.Unix() >= c.Expiry:
		return c, fmt.Errorf("%w: it expired at %s", ErrInvalid, time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339))
	case c.Expiry-c.Issued > int64(MaxLifetime/time.Second), c.Issued > now.Add(time.Minute).Unix():
		return c, fmt.Errorf("%w: its lifetime is not one a host makes", ErrInvalid)
	}
	return c, nil
}

// NewKey makes a signing key.
func NewKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	return priv, err
}

// PublicText is pub in its text form, for the trust ConfigMap.
func PublicText(pub ed25519.PublicKey) string {
	return keyPrefix + base64.StdEncoding.EncodeToString(pub) + "\n"
}

// Fingerprint is pub's SHA-256, in hex: what a pod's spec pins the
// trust key to (the agent's -trust-key-sha256).
func Fingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// CheckFingerprint refuses pub unless its Fingerprint is want: a trust
// ConfigMap made again with another key than the one the pod was made
// for.
func CheckFingerprint(pub ed25519.PublicKey, want string) error {
	if have := Fingerprint(pub); subtle.ConstantTimeCompare([]byte(have), []byte(strings.ToLower(want))) != 1 {
		return fmt.Errorf("the trust key's SHA-256 is %s, not %.64q, the one this pod was made for: the trust ConfigMap was changed since", have, want)
	}
	return nil
}

// ParsePublic reads a public key's text form.
func ParsePublic(text string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(text), keyPrefix)
	if !ok {
		return nil, fmt.Errorf("a trust key is %q and the key in base64", keyPrefix)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("a trust key is %d bytes of base64", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ReadIdentity reads the pod's identity from the downward API's files in
// dir (namespace, name, uid).
func ReadIdentity(dir string) (Identity, error) {
	var id Identity
	for _, f := range []struct {
		name string
		to   *string
	}{{"namespace", &id.Namespace}, {"name", &id.Pod}, {"uid", &id.UID}} {
		b, err := os.ReadFile(dir + "/" + f.name)
		if err != nil {
			return id, fmt.Errorf("the pod's identity: %w", err)
		}
		*f.to = strings.TrimSpace(string(b))
		if *f.to == "" || len(*f.to) > 253 {
			return id, fmt.Errorf("the pod's identity: %s/%s is empty or too long", dir, f.name)
		}
	}
	return id, nil
}
