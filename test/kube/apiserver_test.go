package kube_test

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"sigs.k8s.io/yaml"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// startEtcd starts etcd in this process on loopback, its data in a
// temporary directory, and returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
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
func freeURL(t *testing.T) url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// startAPIServer starts a real kube-apiserver in this process, over
// etcd, with agent-sandbox's CRDs installed when sandboxes is set. There
// is no scheduler, controller or kubelet: the tests bring what they need.
func startAPIServer(t *testing.T, sandboxes bool) *rest.Config {
	t.Helper()
	storage := storagebackend.NewDefaultConfig("/"+strings.ReplaceAll(t.Name(), "/", "-"), nil)
	storage.Transport.ServerList = []string{startEtcd(t)}
	srv, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(), nil, storage)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Cleanup(srv.TearDownFn)
	cfg := rest.CopyConfig(srv.ClientConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	if sandboxes {
		installCRDs(t, cfg)
	}
	return cfg
}

// installCRDs installs agent-sandbox's CRDs, from the module this
// build uses, and waits until they are served.
func installCRDs(t *testing.T, cfg *rest.Config) {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/agent-sandbox").Output()
	if err != nil {
		t.Fatalf("go mod download sigs.k8s.io/agent-sandbox: %v", err)
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
	waittest.For(t, 30*time.Second, "agent-sandbox's CRDs established", func() bool {
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
		}
		return true
	})
}

// writeKubeconfig writes a kubeconfig that reaches cfg's server as cfg's
// user, for the CLI.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile, TLSServerName: cfg.ServerName}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// A real API server starts, with agent-sandbox's CRDs, and answers.
func TestAPIServerStarts(t *testing.T) {
	start := time.Now()
	cfg := startAPIServer(t, true)
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	if cfg.Host == "" {
		t.Fatal("no host")
	}
}
