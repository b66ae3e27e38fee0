package kube

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/egressca"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// A kube neuron's secrets. The proxy that puts a secret into requests
// runs beside whichever host holds the neuron's egress tunnel (egress.go),
// so every replica must be able to read the secrets' values, and none
// may depend on one host's memory. The values, the placeholders the
// neuron holds instead, and the authority the proxy signs the secrets'
// hosts with (made by the host at the create: the neuron trusts its
// certificate for its pod's life, whichever host serves it) are sealed
// with a key every replica derives from the signing key they share
// (AES-256-GCM, bound to the namespace and the neuron's id) and kept in
// the pod's annotation AnnotationSecrets, beside its allow-list. Only the
// pod's makers write it, the neuron has no way to the API server, and
// whoever may read pods reads the secrets' names and hosts, never their
// values. The neuron's pod gets the placeholders in its environment and
// the authority's certificate (boot.EnvEgressCA), which its agent writes where
// boot.EgressCAEnv points its programs. No Secret object is made: the
// host needs no right to make Secrets.

// AnnotationSecrets, on a neuron pod, is its secrets (podSecrets, JSON):
// their names and hosts in clear, the rest sealed.
const AnnotationSecrets = "neuron.nsys-cortex/secrets"

// podSecrets is AnnotationSecrets' value.
type podSecrets struct {
	Secrets []sandbox.SecretPolicy `json:"secrets"`
	// Sealed is the nonce and AES-256-GCM sealing of a
	// boot.EgressTunnelSecrets (without UpstreamCAs: the serving host's
	// own), whose additional data is sealedAAD.
	Sealed []byte `json:"sealed"`
}

// neuronSecrets is what a create with secrets gives its neuron's pod.
type neuronSecrets struct {
	Env        []string // NAME=placeholder
	CACert     string   // the authority's certificate, PEM
	Annotation string   // AnnotationSecrets' value
}

// makeSecrets gives each of list a placeholder of its own, makes their
// authority, and seals them for neuron id of namespace with key's.
func makeSecrets(key ed25519.PrivateKey, namespace, id string, list []sandbox.Secret) (*neuronSecrets, error) {
	payload := boot.EgressTunnelSecrets{}
	var env []string
	payload.Secrets, env = sandbox.SecretPlaceholders(list)
	var clear []sandbox.SecretPolicy
	var hosts []string
	for _, s := range list {
		clear = append(clear, sandbox.SecretPolicy{Name: s.Name, Hosts: slices.Clone(s.Hosts)})
		hosts = append(hosts, s.Hosts...)
	}
	cert, ckey, err := egressca.New(hosts)
	if err != nil {
		return nil, err
	}
	payload.CACert, payload.CAKey = string(cert), string(ckey)
	plain, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	aead, err := sealer(key)
	if err != nil {
		return nil, err
	}
	aad, err := sealedAAD(namespace, id, clear)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	ps := podSecrets{Secrets: clear, Sealed: aead.Seal(nonce, nonce, plain, aad)}
	ann, err := json.Marshal(ps)
	if err != nil {
		return nil, err
	}
	return &neuronSecrets{Env: env, CACert: string(cert), Annotation: string(ann)}, nil
}

// sealer is the AEAD of the replicas that share key.
func sealer(key ed25519.PrivateKey) (cipher.AEAD, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("no signing key to seal secrets with")
	}
	k, err := hkdf.Key(sha256.New, key.Seed(), nil, "nsys-cortex kube secrets v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealedAAD binds a sealing to its neuron and the names it shows.
func sealedAAD(namespace, id string, clear []sandbox.SecretPolicy) ([]byte, error) {
	c, err := json.Marshal(clear)
	if err != nil {
		return nil, err
	}
	return append([]byte("nsys-cortex kube secrets v1\x00"+namespace+"\x00"+id+"\x00"), c...), nil
}

// podSecretsOf reads pod's AnnotationSecrets in clear: false when it has
// none.
func podSecretsOf(pod *corev1.Pod) (podSecrets, bool, error) {
	v, ok := pod.Annotations[AnnotationSecrets]
	if !ok {
		return podSecrets{}, false, nil
	}
	var ps podSecrets
	if err := json.Unmarshal([]byte(v), &ps); err != nil {
		return ps, true, fmt.Errorf("pod %s's annotation %s: %w", pod.Name, AnnotationSecrets, err)
	}
	return ps, true, nil
}

// openSecrets unseals ps, the secrets of neuron id's pod in namespace,
// with key: the secrets and their authority, checked as the proxy will
// check them. An annotation sealed with another key, or for another
// neuron, or whose names were changed, is refused.
func openSecrets(key ed25519.PrivateKey, namespace, id string, ps podSecrets) (boot.EgressTunnelSecrets, error) {
	var out boot.EgressTunnelSecrets
	aead, err := sealer(key)
	if err != nil {
		return out, err
	}
	aad, err := sealedAAD(namespace, id, ps.Secrets)
	if err != nil {
		return out, err
	}
	if len(ps.Sealed) < aead.NonceSize() {
		return out, errors.New("its secrets' annotation holds no sealing")
	}
	plain, err := aead.Open(nil, ps.Sealed[:aead.NonceSize()], ps.Sealed[aead.NonceSize():], aad)
	if err != nil {
		return out, errors.New("its secrets' annotation was not sealed for it with this host's signing key (made by another key, for another neuron, or changed)")
	}
	if err := json.Unmarshal(plain, &out); err != nil {
		return out, err
	}
	if _, _, err := egressca.Parse([]byte(out.CACert), []byte(out.CAKey)); err != nil {
		return out, err
	}
	return out, nil
}

// sealedForPod checks that sec was sealed for pod's start: its authority
// is the one the pod's agent was given and its placeholders the ones in
// the pod's environment. Both are new at every start and a running pod's
// environment cannot change, so an older start's seal (of a value since
// rotated or revoked, or of an earlier neuron of the id) put back on the
// annotation by whoever may patch pods does not open here.
func sealedForPod(sec boot.EgressTunnelSecrets, pod *corev1.Pod) error {
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[boot.EnvEgressCA] != sec.CACert {
		return errors.New("its secrets' annotation was sealed for another start (its authority is not the pod's)")
	}
	for _, s := range sec.Secrets {
		if env[s.Name] != s.Placeholder {
			return fmt.Errorf("its secrets' annotation was sealed for another start (secret %s's placeholder is not the pod's)", s.Name)
		}
	}
	return nil
}
