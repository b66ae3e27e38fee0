package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// clearKubeEnv unsets every kube setting for the test.
func clearKubeEnv(t *testing.T) {
	for _, e := range []string{EnvImage, EnvNamespace, EnvRuntimeClass, EnvStorageClass, EnvHomeSize, EnvKubeconfig, EnvSigningKey, EnvAPIKeys} {
		t.Setenv(e, "")
	}
}

// Settings come from the environment: without an image the mode is off
// and says how to turn it on; bad names and sizes are refused by key.
func TestSettingsFromEnv(t *testing.T) {
	clearKubeEnv(t)
	home := t.TempDir()
	_, err := SettingsFromEnv(home)
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "set kube.image") {
		t.Fatalf("no image: %v", err)
	}
	t.Setenv(EnvImage, "registry.example/neuron:1")
	s, err := SettingsFromEnv(home)
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Namespace != "nsys-cortex" || s.Config.HomeSize.String() != "10Gi" || s.SigningKey != filepath.Join(home, "kube", "signing.key") {
		t.Fatalf("defaults: %+v", s)
	}
	t.Setenv(EnvHomeSize, "20g")
	t.Setenv(EnvNamespace, "agents")
	t.Setenv(EnvRuntimeClass, "gvisor")
	if s, err = SettingsFromEnv(home); err != nil || s.Config.HomeSize.String() != "20Gi" || s.Config.Namespace != "agents" || s.Config.RuntimeClass != "gvisor" {
		t.Fatalf("%+v %v", s, err)
	}
	for env, bad := range map[string]string{EnvNamespace: "Agents_1", EnvRuntimeClass: "-x", EnvHomeSize: "lots"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			if _, err := SettingsFromEnv(home); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), bad) {
				t.Fatalf("%s=%s: %v", env, bad, err)
			}
		})
	}
}

// The signing key is made once (0600) and read back the same; a file
// that is not an Ed25519 key is refused, naming it.
func TestSigningKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kube", "signing.key")
	k1, err := LoadSigningKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi.Mode(), err)
	}
	k2, err := LoadSigningKey(p)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("read back: %v", err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	for name, body := range map[string][]byte{
		"garbage": []byte("hello"),
		"ecdsa":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
	} {
		bad := filepath.Join(t.TempDir(), name)
		os.WriteFile(bad, body, 0o600)
		if _, err := LoadSigningKey(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The trust ConfigMap is made with the key's public half when missing,
// taken when it holds the same key (another host made it first, even
// between this host's get and create), and refused when it holds another.
func TestEnsureTrust(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Namespace: "n"}.Defaults()
	key, _ := podtoken.NewKey()
	core := fake.NewClientset()
	if err := EnsureTrust(ctx, core, cfg, key); err != nil {
		t.Fatal(err)
	}
	cm, err := core.CoreV1().ConfigMaps("n").Get(ctx, cfg.TrustConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := podtoken.ParsePublic(cm.Data[TrustKey]); err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("the ConfigMap holds %q: %v", cm.Data[TrustKey], err)
	}
	if cm.Immutable == nil || !*cm.Immutable {
		t.Fatal("the trust ConfigMap can be updated: another key could be put in it")
	}
	if err := EnsureTrust(ctx, core, cfg, key); err != nil {
		t.Fatalf("again: %v", err)
	}
	other, _ := podtoken.NewKey()
	if err := EnsureTrust(ctx, core, cfg, other); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("another key: %v", err)
	}

	// A race: the get finds none, the create finds one.
	raced := fake.NewClientset()
	var gets atomic.Int32
	raced.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) == 1 {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, cfg.TrustConfigMap)
		}
		return true, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cfg.TrustConfigMap}, Data: map[string]string{TrustKey: podtoken.PublicText(key.Public().(ed25519.PublicKey))}}, nil
	})
	raced.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, cfg.TrustConfigMap)
	})
	if err := EnsureTrust(ctx, raced, cfg, key); err != nil || gets.Load() != 2 {
		t.Fatalf("a ConfigMap made meanwhile: %v (%d gets)", err, gets.Load())
	}
	// Forbidden: the error says what to grant.
	denied := fake.NewClientset()
	denied.PrependReactor("*", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, cfg.TrustConfigMap, errors.New("RBAC"))
	})
	if err := EnsureTrust(ctx, denied, cfg, key); err == nil || !strings.Contains(err.Error(), "configmaps") {
		t.Fatalf("forbidden: %v", err)
	}
}

// fakeAPIServer answers what the self-check asks: discovery of
// agent-sandbox's group (served or not) and the namespace.
func fakeAPIServer(t *testing.T, sandboxes bool, namespace string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/namespaces/"+namespace && strings.HasPrefix(namespace, "forbidden-"):
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonForbidden, Code: 403,
				Message: "namespaces is forbidden: cannot get resource namespaces at the cluster scope"})
		case r.URL.Path == "/api/v1/namespaces/"+namespace+"/pods" && r.Method == http.MethodPost:
			// The dry run: admission as a cluster with one RuntimeClass,
			// gvisor, and Pod Security that refuses pods of namespaces
			// named "restricted-*".
			var pod corev1.Pod
			body, _ := io.ReadAll(r.Body)
			if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &pod); err != nil {
				t.Errorf("the dry run's pod: %v", err)
			}
			rc := pod.Spec.RuntimeClassName
			switch {
			case r.URL.Query().Get("dryRun") != "All":
				w.WriteHeader(http.StatusBadRequest)
			case rc != nil && *rc != "gvisor":
				w.WriteHeader(http.StatusForbidden)
				json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonForbidden, Code: 403,
					Message: fmt.Sprintf("pods %q is forbidden: pod rejected: RuntimeClass %q not found", pod.Name, *rc)})
			case strings.HasPrefix(namespace, "restricted-"):
				w.WriteHeader(http.StatusForbidden)
				json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonForbidden, Code: 403,
					Message: fmt.Sprintf(`pods %q is forbidden: violates PodSecurity "restricted:latest": seLinuxOptions`, pod.Name)})
			default:
				w.WriteHeader(http.StatusCreated)
				pod.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
				json.NewEncoder(w).Encode(&pod)
			}
		case r.URL.Path == "/api/v1/namespaces/"+namespace+"/secrets/api-keys":
			json.NewEncoder(w).Encode(&corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "api-keys", Namespace: namespace, ResourceVersion: "7"}, Data: map[string][]byte{apiKeysData: []byte(`{"keys":[]}`)}})
		case r.URL.Path == "/apis/node.k8s.io/v1/runtimeclasses":
			json.NewEncoder(w).Encode(&nodev1.RuntimeClassList{TypeMeta: metav1.TypeMeta{Kind: "RuntimeClassList", APIVersion: "node.k8s.io/v1"},
				Items: []nodev1.RuntimeClass{{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}}})
		case r.URL.Path == "/api/v1/namespaces/"+namespace+"/pods":
			json.NewEncoder(w).Encode(&corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}})
		case r.URL.Path == "/apis/rbac.authorization.k8s.io/v1/namespaces/"+namespace+"/rolebindings":
			// Nothing granted in the namespace (test/kube's
			// TestDoctorHostGrants drives the grants' check on real RBAC).
			json.NewEncoder(w).Encode(&rbacv1.RoleBindingList{TypeMeta: metav1.TypeMeta{Kind: "RoleBindingList", APIVersion: "rbac.authorization.k8s.io/v1"}})
		case r.URL.Path == "/apis/agents.x-k8s.io/v1beta1" && sandboxes:
			json.NewEncoder(w).Encode(&metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
				GroupVersion: "agents.x-k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "sandboxes", Kind: "Sandbox", Namespaced: true}}})
		case r.URL.Path == "/api/v1/namespaces/"+namespace:
			json.NewEncoder(w).Encode(&corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: namespace}})
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonNotFound, Code: 404, Message: r.URL.Path + " not found"})
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// kubeconfigFor writes a kubeconfig that reaches server.
func kubeconfigFor(t *testing.T, server string) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n", server)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The self-check says, item by item, what kube mode lacks: a setting,
// the cluster, the namespace; and which objects neurons are made of.
func TestSelfCheck(t *testing.T) {
	clearKubeEnv(t)
	lay, err := layout.New(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	env := sandbox.Env{Layout: lay}
	ctx := context.Background()
	if c := SelfCheck(ctx, env); c.OK || !strings.Contains(c.Summary, "kube.image") {
		t.Fatalf("not configured: %+v", c)
	}
	t.Setenv(EnvImage, "neuron:1")
	// The fake API server runs no pods: the network probe is not run
	// (test/kube's TestNetworkProbe has doctor's line on it).
	t.Setenv(EnvOpenNetwork, "true")
	t.Setenv(EnvKubeconfig, kubeconfigFor(t, "http://127.0.0.1:1"))
	if c := SelfCheck(ctx, env); c.OK || !strings.Contains(c.Summary, "cannot be reached") || !strings.Contains(fmt.Sprint(c.Items), "127.0.0.1:1") {
		t.Fatalf("unreachable: %+v", c)
	}
	t.Setenv(EnvKubeconfig, kubeconfigFor(t, fakeAPIServer(t, true, "elsewhere")))
	if c := SelfCheck(ctx, env); c.OK || !strings.Contains(c.Summary, "namespace nsys-cortex") {
		t.Fatalf("no namespace: %+v", c)
	}
	// Without a cluster-wide grant (deploy/kubernetes gives none), the
	// namespace's pods are what is checked.
	t.Setenv(EnvNamespace, "forbidden-ns")
	t.Setenv(EnvKubeconfig, kubeconfigFor(t, fakeAPIServer(t, true, "forbidden-ns")))
	if c := SelfCheck(ctx, env); !c.OK || !strings.Contains(fmt.Sprint(c.Items), "its pods can be listed") {
		t.Fatalf("no grant to read namespaces: %+v", c)
	}
	t.Setenv(EnvNamespace, "")
	// The RuntimeClass: listed with what the cluster offers; one it does
	// not have fails the check, naming it.
	t.Setenv(EnvKubeconfig, kubeconfigFor(t, fakeAPIServer(t, true, "nsys-cortex")))
	if c := SelfCheck(ctx, env); !c.OK || !strings.Contains(fmt.Sprint(c.Items), "none set") || !strings.Contains(fmt.Sprint(c.Items), "gvisor (runsc)") {
		t.Fatalf("no RuntimeClass set: %+v", c)
	}
	t.Setenv(EnvRuntimeClass, "gvisor")
	if c := SelfCheck(ctx, env); !c.OK || !strings.Contains(fmt.Sprint(c.Items), "admission takes it") {
		t.Fatalf("RuntimeClass gvisor: %+v", c)
	}
	t.Setenv(EnvRuntimeClass, "kata")
	if c := SelfCheck(ctx, env); c.OK || !strings.Contains(fmt.Sprint(c.Items), "kata is not in the cluster") || !strings.Contains(c.Summary, `RuntimeClass "kata" not found`) {
		t.Fatalf("RuntimeClass kata, which the cluster lacks: %+v", c)
	}
	t.Setenv(EnvRuntimeClass, "")
	// The namespace's admission refusing the pod.
	t.Setenv(EnvNamespace, "restricted-ns")
	t.Setenv(EnvKubeconfig, kubeconfigFor(t, fakeAPIServer(t, true, "restricted-ns")))
	if c := SelfCheck(ctx, env); c.OK || !strings.Contains(c.Summary, "Pod Security admission refuses") {
		t.Fatalf("Pod Security refusing the pod: %+v", c)
	}
	t.Setenv(EnvNamespace, "")
	// The shared API keys (kube.api_keys): a Secret that is there and
	// readable passes; one that is not there fails, saying what makes it.
	t.Setenv(EnvKubeconfig, kubeconfigFor(t, fakeAPIServer(t, true, "nsys-cortex")))
	t.Setenv(EnvAPIKeys, "api-keys")
	if c := SelfCheck(ctx, env); !c.OK || !strings.Contains(fmt.Sprint(c.Items), "readable (11 bytes)") {
		t.Fatalf("the shared keys' Secret: %+v", c)
	}
	t.Setenv(EnvAPIKeys, "no-such-keys")
	if c := SelfCheck(ctx, env); c.OK || !strings.Contains(c.Summary, "api-keys.yaml") {
		t.Fatalf("no shared keys' Secret: %+v", c)
	}
	t.Setenv(EnvAPIKeys, "")
	for _, sandboxes := range []bool{true, false} {
		t.Setenv(EnvKubeconfig, kubeconfigFor(t, fakeAPIServer(t, sandboxes, "nsys-cortex")))
		c := SelfCheck(ctx, env)
		want := map[bool]string{true: "a neuron is a Sandbox", false: "a neuron is a Pod"}[sandboxes]
		if !c.OK || !strings.Contains(fmt.Sprint(c.Items), want) {
			t.Fatalf("sandboxes served %v: %+v", sandboxes, c)
		}
	}
}

// Pause and resume are refused as UNSUPPORTED, saying what to do instead.
func TestPauseUnsupported(t *testing.T) {
	var m Manager
	_, perr := m.Pause(context.Background(), "n1", sandbox.PauseOptions{})
	_, rerr := m.Resume(context.Background(), "n1")
	for _, err := range []error{perr, rerr} {
		if !errdefs.IsUnsupported(err) || !strings.Contains(err.Error(), "destroy the neuron") {
			t.Errorf("%v", err)
		}
	}
}

// A kube neuron's files are in the cluster: nothing of the host's may
// take them from a path (a file snapshot, a restore into one), so the
// data root is refused, saying why, never "".
func TestNoDataRoot(t *testing.T) {
	var m Manager
	root, err := m.DataRoot(context.Background(), "n1")
	if root != "" || !errdefs.IsUnsupported(err) || !strings.Contains(err.Error(), "not on this host") {
		t.Errorf("DataRoot: %q, %v", root, err)
	}
}

// A hostile or careless key path: a link that leads nowhere is refused,
// not followed to a key made there (nor looped on); a key in a directory
// others may write, one others may read or write, a FIFO, a huge file:
// each refused, naming the path. A link to a good key (a Secret's volume
// is links) is read.
func TestSigningKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	want, err := LoadSigningKey(good)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.key")
	os.Symlink(good, link)
	if k, err := LoadSigningKey(link); err != nil || !k.Equal(want) {
		t.Fatalf("a link to a good key: %v", err)
	}
	dangling := filepath.Join(dir, "dangling.key")
	os.Symlink(filepath.Join(dir, "nowhere", "x.key"), dangling)
	if _, err := LoadSigningKey(dangling); err == nil || !strings.Contains(err.Error(), dangling) {
		t.Fatalf("a dangling link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); err == nil {
		t.Fatal("a dangling link was followed to make a key")
	}
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777) // past the umask
	other, _ := LoadSigningKey(filepath.Join(t.TempDir(), "k"))
	der, _ := x509.MarshalPKCS8PrivateKey(other)
	os.WriteFile(filepath.Join(open, "k"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	readable := filepath.Join(dir, "readable.key")
	os.WriteFile(readable, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o644)
	os.Chmod(readable, 0o644)
	writable := filepath.Join(dir, "writable.key")
	os.WriteFile(writable, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o620)
	os.Chmod(writable, 0o620)
	fifo := filepath.Join(dir, "fifo.key")
	unix.Mkfifo(fifo, 0o600)
	huge := filepath.Join(dir, "huge.key")
	os.WriteFile(huge, make([]byte, 1<<20), 0o600)
	for name, p := range map[string]string{"a directory others may write": filepath.Join(open, "k"), "world-readable": readable,
		"group-writable": writable, "a FIFO": fifo, "a huge file": huge} {
		if _, err := LoadSigningKey(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Made whole: no file but the key is left beside it.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".signing-") {
			t.Errorf("a temporary file was left: %s", e.Name())
		}
	}
}

// A link dials the pod it was made for, as that pod is now: once the pod
// is replaced (another uid), gone or not running, it dials no one, rather
// than whatever answers at the old address; an IP no agent can listen on
// is refused.
func TestDialerFollowsThePod(t *testing.T) {
	ctx := context.Background()
	core := fake.NewClientset()
	cfg := Config{Namespace: "n"}.Defaults()
	running := func(uid, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "n-a", Namespace: "n", UID: types.UID(uid)},
			Spec:   corev1.PodSpec{NodeName: "node"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	pod, _ := core.CoreV1().Pods("n").Create(ctx, running("u1", "10.0.0.7"), metav1.CreateOptions{})
	m := &Manager{Cluster: &Cluster{Core: core, Config: cfg}}
	dial := m.dialer("a", pod, func() {})
	for range 2 { // the first dial, and a redial to the same pod
		if addr, err := dial(ctx); err != nil || addr != "10.0.0.7:7070" {
			t.Fatalf("%q %v", addr, err)
		}
	}
	for name, change := range map[string]func(){
		"replaced": func() {
			core.CoreV1().Pods("n").Delete(ctx, "n-a", metav1.DeleteOptions{})
			core.CoreV1().Pods("n").Create(ctx, running("u2", "10.0.0.8"), metav1.CreateOptions{})
		},
		"gone": func() { core.CoreV1().Pods("n").Delete(ctx, "n-a", metav1.DeleteOptions{}) },
		"not running": func() {
			p := running("u1", "10.0.0.7")
			p.Status.Phase = corev1.PodFailed
			core.CoreV1().Pods("n").Delete(ctx, "n-a", metav1.DeleteOptions{})
			core.CoreV1().Pods("n").Create(ctx, p, metav1.CreateOptions{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			core.CoreV1().Pods("n").Delete(ctx, "n-a", metav1.DeleteOptions{})
			core.CoreV1().Pods("n").Create(ctx, running("u1", "10.0.0.7"), metav1.CreateOptions{})
			gone := 0
			dial := m.dialer("a", pod, func() { gone++ })
			dial(ctx)
			change()
			if addr, err := dial(ctx); err == nil {
				t.Fatalf("a redial after the pod was %s went to %s", name, addr)
			}
			// For good: the link's owner is told to end it, though no
			// informer event may ever say so.
			if gone != 1 {
				t.Errorf("the pod %s: gone called %d times, want 1", name, gone)
			}
		})
	}
	for _, ip := range []string{"", "0.0.0.0", "::", "224.0.0.1", "example.com", "10.0.0.7:80"} {
		if addr, err := m.dialer("a", running("u1", ip), func() {})(ctx); err == nil {
			t.Errorf("pod IP %q: dialled %s", ip, addr)
		}
	}
}

// A host's clients are not held to client-go's default of 5 requests a
// second (a create is several), whether the kubeconfig or the pod's
// service account reaches the cluster; a limit set in code is kept.
func TestClientRate(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if qps := core.CoreV1().RESTClient().GetRateLimiter().QPS(); qps != APIQPS {
		t.Fatalf("a host's client from a kubeconfig sends at most %v requests a second, want %d", qps, APIQPS)
	}
	if rc.Burst != 2*APIQPS {
		t.Fatalf("burst %d", rc.Burst)
	}
	set := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 7, Burst: 9}
	if withRate(set); set.QPS != 7 || set.Burst != 9 {
		t.Fatalf("a limit set in code was changed: %v/%d", set.QPS, set.Burst)
	}
}
