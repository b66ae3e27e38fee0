package kube

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// EnvAPIKeys names the Secret (in kube.namespace) that holds the API keys
// every replica of a deployment shares (config key kube.api_keys); empty:
// each daemon's keys are its home's.
const EnvAPIKeys = "NSYS_CORTEX_KUBE_API_KEYS"

// apiKeysData is the Secret's key that holds the keys file; apiUsedData
// the one that holds when each was last used (apikey.SharedUse), which
// every replica writes at most every 10 s.
const (
	apiKeysData = "api-keys.json"
	apiUsedData = "api-keys.used.json"
)

// SecretKeys keeps the API keys' file (apikey.Shared) in a Secret, so
// that a key made through one replica works through every other and
// outlives any of their pods. Whoever may write Secrets in the namespace
// may make keys: the same right that reads the signing key's Secret.
type SecretKeys struct {
	Core      kubernetes.Interface
	Namespace string
	Name      string
}

// SecretKeysFromEnv is the Secret EnvAPIKeys names, reached as kube mode
// reaches its cluster (kube.kubeconfig), in the hosts' namespace
// (kube.host_namespace, else kube.namespace); nil when
// EnvAPIKeys is unset.
func SecretKeysFromEnv() (*SecretKeys, error) {
	name := os.Getenv(EnvAPIKeys)
	if name == "" {
		return nil, nil
	}
	if err := CheckName(name); err != nil {
		return nil, fmt.Errorf("kube.api_keys %q: %v", name, err)
	}
	ns, err := hostNamespaceFromEnv()
	if err != nil {
		return nil, fmt.Errorf("kube.api_keys: %w", err)
	}
	rc, err := RESTConfig(os.Getenv(EnvKubeconfig))
	if err != nil {
		return nil, fmt.Errorf("kube.api_keys: %w", err)
	}
	rc.Timeout = 10 * time.Second
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube.api_keys: %w", err)
	}
	return &SecretKeys{Core: core, Namespace: ns, Name: name}, nil
}

// Where names the Secret.
func (s *SecretKeys) Where() string { return "Secret " + s.Namespace + "/" + s.Name }

// Load returns the keys' bytes (nil: no Secret yet) and its
// resourceVersion.
func (s *SecretKeys) Load() ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sec, err := s.Core.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", explain(err, "get", "secrets", s.Namespace)
	}
	return sec.Data[apiKeysData], sec.ResourceVersion, nil
}

// LoadUsed returns when each key was last used (apikey.SharedUse), nil
// when that is not there yet.
func (s *SecretKeys) LoadUsed() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sec, err := s.Core.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, explain(err, "get", "secrets", s.Namespace)
	}
	return sec.Data[apiUsedData], nil
}

// ChangeUsed is Change for when each key was last used.
func (s *SecretKeys) ChangeUsed(fn func([]byte) ([]byte, error)) error {
	return s.change(apiUsedData, fn)
}

// Change writes fn's bytes in place of the Secret's, making it when it is
// not there, and calls fn again when another writer changed it between
// the read and the write (the update names the version it read).
func (s *SecretKeys) Change(fn func([]byte) ([]byte, error)) error {
	return s.change(apiKeysData, fn)
}

// change is Change of the Secret's key data.
func (s *SecretKeys) change(data string, fn func([]byte) ([]byte, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secrets := s.Core.CoreV1().Secrets(s.Namespace)
	for range 10 {
		sec, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			b, err := fn(nil)
			if err != nil {
				return err
			}
			sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{LabelManaged: managedBy}},
				Type: corev1.SecretTypeOpaque, Data: map[string][]byte{data: b}}
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another made it first: change theirs
			}
			if apierrors.IsForbidden(err) {
				return errdefs.New(errdefs.Permission, fmt.Sprintf("%s is not there, and this host may not make it: "+
					"apply deploy/kubernetes/api-keys.yaml (the base makes it empty), or make it: %v", s.Where(), err))
			}
			if err != nil {
				return explain(err, "create", "secrets", s.Namespace)
			}
			return nil
		case err != nil:
			return explain(err, "get", "secrets", s.Namespace)
		}
		b, err := fn(sec.Data[data])
		if err != nil {
			return err
		}
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		sec.Data[data] = b
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // changed since it was read: again, on the new keys
		}
		if err != nil {
			return explain(err, "update", "secrets", s.Namespace)
		}
		return nil
	}
	return errdefs.New(errdefs.Unavailable, fmt.Sprintf("%s changed under every one of 10 tries to write it", s.Where()))
}

// hostNamespaceFromEnv is the hosts' namespace the environment sets
// (EnvHostNS, else EnvNamespace, else the default), checked.
func hostNamespaceFromEnv() (string, error) {
	c := Config{Namespace: os.Getenv(EnvNamespace), HostNamespace: os.Getenv(EnvHostNS)}.Defaults()
	if err := CheckConfig(c); err != nil {
		return "", err
	}
	return c.HostNamespace, nil
}
