// Package cluster is a Kubernetes control plane in one process for kube
// mode's tests and for test/kube/devcluster: etcd
// (go.etcd.io/etcd/server/v3/embed) and a real kube-apiserver
// (k8s.io/kubernetes' test server), agent-sandbox's CRDs from the pinned
// module, and what a cluster holds before Cortex's first neuron. There
// is no scheduler, controller manager or kubelet: kubesim brings what a
// neuron needs of them.
package cluster

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
)

// T is what the control plane needs of its owner: a test's testing.T,
// or devcluster's stand-in for one. Its cleanups stop everything.
type T = ktesting.TB

// Options say what Start starts.
type Options struct {
	// Sandboxes installs agent-sandbox's CRDs; without them kube mode
	// makes plain pods and claims.
	Sandboxes bool
	// Quiet keeps etcd's errors on shutdown out of the log.
	Quiet bool
	// RBAC has the server authorize with RBAC, as clusters do (else it
	// allows every request). The configuration Start returns is the
	// server's own, which RBAC lets do anything.
	RBAC bool
}

// Start starts etcd and a kube-apiserver in this process, on loopback,
// as o says, and returns a configuration that reaches the server as its
// administrator.
func Start(t T, o Options) *rest.Config {
	t.Helper()
	storage := storagebackend.NewDefaultConfig("/"+strings.ReplaceAll(t.Name(), "/", "-"), nil)
	storage.Transport.ServerList = []string{startEtcd(t, o.Quiet)}
	var flags []string
	if o.RBAC {
		flags = append(flags, "--authorization-mode=RBAC")
	}
	srv, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(), flags, storage)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Cleanup(srv.TearDownFn)
	cfg := rest.CopyConfig(srv.ClientConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	if o.Sandboxes {
		installCRDs(t, cfg)
	}
	return cfg
}

// startEtcd starts etcd in this process on loopback, its data in a
// temporary directory, and returns its client URL.
func startEtcd(t T, quiet bool) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	if quiet {
		cfg.LogLevel = "fatal"
	}
	cfg.Logger = "zap"
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd did not start within 30 s")
	}
	return client.String()
}

// freeURL is an http URL of a loopback port free now.
func freeURL(t T) url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// installCRDs installs agent-sandbox's CRDs, from the module this
// build uses, and waits until they are served.
func installCRDs(t T, cfg *rest.Config) {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/agent-sandbox").Output()
	if err != nil {
		t.Fatalf("go mod download sigs.k8s.io/agent-sandbox (run from test/kube): %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("agent-sandbox's module: %v %s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(mod.Dir, "k8s", "crds", "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no CRDs in %s", mod.Dir)
	}
	cs := apiext.NewForConfigOrDie(cfg)
	ctx := context.Background()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", f, err)
		}
		names = append(names, crd.Name)
	}
	// Established, and in discovery too: a controller's REST mapper reads
	// discovery, which the server updates after the condition (a
	// controller started in between failed with "no matches for kind").
	established := func() bool {
		for _, n := range names {
			crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false
			}
			ok := false
			for _, c := range crd.Status.Conditions {
				ok = ok || c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue
			}
			if !ok {
				return false
			}
			for _, v := range crd.Spec.Versions {
				list, err := cs.Discovery().ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
				if err != nil || !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == crd.Spec.Names.Kind }) {
					return false
				}
			}
		}
		return true
	}
	poll := func(ctx context.Context) (bool, error) { return established(), nil }
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, poll); err != nil {
		t.Fatal("agent-sandbox's CRDs not established within 30 s")
	}
}

// Prepare makes what a cluster has before Cortex's first neuron: cfg's
// namespace, its default service account (the controller manager's
// work, which this server does not run) and cfg's RuntimeClass.
func Prepare(t T, core kubernetes.Interface, cfg kube.Config) {
	t.Helper()
	ctx := context.Background()
	cfg = cfg.Defaults()
	// One namespace, or two as deploy/kubernetes makes them (the
	// neurons', the hosts'), each with the ServiceAccount a cluster's
	// controller would make.
	for _, ns := range slices.Compact([]string{cfg.Namespace, cfg.HostNamespace}) {
		if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := core.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.RuntimeClass != "" {
		if _, err := core.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: cfg.RuntimeClass}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// Agents is agent-sandbox's client on rc: JSON, as custom resources have
// no protobuf form (the test server's configuration asks for protobuf).
func Agents(rc *rest.Config) agents.Interface {
	rc = rest.CopyConfig(rc)
	rc.ContentType, rc.AcceptContentTypes = "application/json", "application/json"
	return agents.NewForConfigOrDie(rc)
}

// Extensions is the client of agent-sandbox's extensions (claims, warm
// pools, templates) on rc, in JSON as Agents.
func Extensions(rc *rest.Config) extclient.Interface {
	rc = rest.CopyConfig(rc)
	rc.ContentType, rc.AcceptContentTypes = "application/json", "application/json"
	return extclient.NewForConfigOrDie(rc)
}

// WriteKubeconfig writes to path (0600) a kubeconfig that reaches cfg's
// server as cfg's user.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cortex-dev"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile, TLSServerName: cfg.ServerName}
	kc.AuthInfos["cortex-dev"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups}
	kc.Contexts["cortex-dev"] = &clientcmdapi.Context{Cluster: "cortex-dev", AuthInfo: "cortex-dev"}
	kc.CurrentContext = "cortex-dev"
	return clientcmd.WriteToFile(*kc, path)
}
