package kube

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/config"
	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The settings of kube mode, from the environment (the config keys kube.*,
// which the CLI exports): kube mode is configured when EnvImage is set.
const (
	EnvImage        = "NSYS_CORTEX_KUBE_IMAGE"
	EnvNamespace    = "NSYS_CORTEX_KUBE_NAMESPACE"
	EnvHostNS       = "NSYS_CORTEX_KUBE_HOST_NAMESPACE"
	EnvRuntimeClass = "NSYS_CORTEX_KUBE_RUNTIME_CLASS"
	EnvStorageClass = "NSYS_CORTEX_KUBE_STORAGE_CLASS"
	EnvHomeSize     = "NSYS_CORTEX_KUBE_HOME_SIZE"
	EnvKubeconfig   = "NSYS_CORTEX_KUBE_KUBECONFIG"
	EnvSigningKey   = "NSYS_CORTEX_KUBE_SIGNING_KEY"
	EnvPortForward  = "NSYS_CORTEX_KUBE_PORT_FORWARD"
	EnvOpenNetwork  = "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK"
	EnvWarmPool     = "NSYS_CORTEX_KUBE_WARM_POOL"
)

// MaxWarmPool bounds kube.warm_pool.
const MaxWarmPool = 1000

// NotConfigured is why kube mode cannot run when EnvImage is not set.
const NotConfigured = "not configured: set kube.image to the neuron image the cluster pulls, and kube.namespace (docs/kube.md)"

// Settings are what kube mode is built from.
type Settings struct {
	Config Config
	// Kubeconfig is the file that says how to reach the cluster ("": the
	// KUBECONFIG variable, ~/.kube/config, or the pod's own service
	// account when running in a cluster).
	Kubeconfig string
	// SigningKey is the file of the Ed25519 key that signs pod tokens
	// (PKCS#8 PEM); made, mode 0600, when missing. Every host that drives
	// the same namespace must use the same key.
	SigningKey string
	// PortForward reaches the agents through the API server's
	// port-forward, for a host outside the cluster (see Forwarder).
	PortForward bool
}

// SettingsFromEnv reads kube mode's settings (see the Env constants);
// home is where a missing signing key is made.
func SettingsFromEnv(home string) (Settings, error) {
	s := Settings{
		Config: Config{
			Namespace:     os.Getenv(EnvNamespace),
			HostNamespace: os.Getenv(EnvHostNS),
			Image:         os.Getenv(EnvImage),
			RuntimeClass:  os.Getenv(EnvRuntimeClass),
			StorageClass:  os.Getenv(EnvStorageClass),
		},
		Kubeconfig: os.Getenv(EnvKubeconfig),
		SigningKey: os.Getenv(EnvSigningKey),
	}
	if s.Config.Image == "" {
		return s, &sandbox.UnavailableError{Mode: Mode, Reason: NotConfigured}
	}
	if v := os.Getenv(EnvHomeSize); v != "" {
		n, err := config.ParseBytes(v)
		if err != nil {
			return s, &sandbox.InvalidError{Reason: fmt.Sprintf("%s (kube.home_size): %v", EnvHomeSize, err)}
		}
		s.Config.HomeSize = *resource.NewQuantity(n, resource.BinarySI)
	}
	if v := os.Getenv(EnvPortForward); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, &sandbox.InvalidError{Reason: fmt.Sprintf("%s (kube.port_forward) %q: want true or false", EnvPortForward, v)}
		}
		s.PortForward = b
	}
	if v := os.Getenv(EnvOpenNetwork); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, &sandbox.InvalidError{Reason: fmt.Sprintf("%s (kube.allow_open_network) %q: want true or false", EnvOpenNetwork, v)}
		}
		s.Config.OpenNetwork = b
	}
	if v := os.Getenv(EnvWarmPool); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 || n > MaxWarmPool {
			return s, &sandbox.InvalidError{Reason: fmt.Sprintf("%s (kube.warm_pool) %q: want a count from 0 to %d", EnvWarmPool, v, MaxWarmPool)}
		}
		s.Config.WarmPool = int32(n)
	}
	if s.SigningKey == "" {
		s.SigningKey = filepath.Join(home, "kube", "signing.key")
	}
	s.Config = s.Config.Defaults()
	if err := CheckConfig(s.Config); err != nil {
		return s, err
	}
	return s, nil
}

// CheckConfig refuses settings no cluster would take, naming them.
func CheckConfig(c Config) error {
	if err := CheckName(c.Namespace); err != nil {
		return &sandbox.InvalidError{Reason: fmt.Sprintf("kube.namespace %q: %v", c.Namespace, err)}
	}
	if c.HostNamespace != "" {
		if err := CheckName(c.HostNamespace); err != nil {
			return &sandbox.InvalidError{Reason: fmt.Sprintf("kube.host_namespace %q: %v", c.HostNamespace, err)}
		}
	}
	if c.RuntimeClass != "" {
		if err := CheckName(c.RuntimeClass); err != nil {
			return &sandbox.InvalidError{Reason: fmt.Sprintf("kube.runtime_class %q: %v", c.RuntimeClass, err)}
		}
	}
	return nil
}

// CheckName checks a namespace or class name: a DNS label (lower-case
// letters, digits and '-', at most 63, starting and ending alphanumeric).
func CheckName(s string) error {
	if s == "" || len(s) > 63 {
		return errors.New("want 1 to 63 characters")
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return errors.New("want lower-case letters, digits and '-', starting and ending with a letter or digit")
		}
	}
	return nil
}

// RESTConfig is how to reach the cluster: the kubeconfig named, or
// KUBECONFIG and ~/.kube/config as kubectl reads them, or the service
// account of the pod this runs in.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err == nil {
		return withRate(cfg), nil
	}
	if kubeconfig == "" {
		if in, ierr := rest.InClusterConfig(); ierr == nil {
			return withRate(in), nil
		}
	}
	return nil, &sandbox.UnavailableError{Mode: Mode, Reason: fmt.Sprintf("no way to the cluster: %v (set kube.kubeconfig or KUBECONFIG, or run in a pod with a service account)", err)}
}

// APIQPS is the requests a second a host sends the API server at most,
// with bursts of twice as many, where rc sets no limit of its own (a
// kubeconfig cannot). client-go's own default, 5 a second with bursts of
// 10, held a host to one or two creates a second (each is several
// requests) and queued the rest behind its client: the API server's
// priority and fairness is what protects it from a busy host.
const APIQPS = 100

// withRate gives rc the host's client-side limit where it has none.
func withRate(rc *rest.Config) *rest.Config {
	if rc.QPS == 0 && rc.RateLimiter == nil {
		rc.QPS, rc.Burst = APIQPS, 2*APIQPS
	}
	return rc
}

// maxKeyFile bounds a signing key's file (a PEM of an Ed25519 key is
// about 120 bytes).
const maxKeyFile = 4 << 10

// LoadSigningKey reads the Ed25519 key at path, or makes one there (0600)
// when there is nothing at path. The file must be one only this user and
// root can change, in a directory only they can change (hostfs), and no
// one else may read (a Secret's volume may let the pod's group read it);
// a link may lead to it (a Secret's volume is links), but a link that
// leads nowhere is refused, not followed to a key made there.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	var lst unix.Stat_t
	if err := unix.Lstat(path, &lst); errors.Is(err, unix.ENOENT) {
		return makeSigningKey(path)
	}
	return readSigningKey(path)
}

// readSigningKey reads and checks the key file at path.
func readSigningKey(path string) (ed25519.PrivateKey, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("kube.signing_key %s: %s", path, fmt.Sprintf(format, a...))
	}
	if err := hostfs.TrustedDir(filepath.Dir(path)); err != nil {
		return nil, bad("%v", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, bad("%v", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, bad("%v", err)
	}
	if err := hostfs.TrustedFile(&st); err != nil {
		return nil, bad("%v", err)
	}
	if st.Mode&0o004 != 0 {
		return nil, bad("anyone may read it (mode %o): chmod o-r", st.Mode&0o777)
	}
	if st.Size > maxKeyFile {
		return nil, bad("%d bytes: not a key", st.Size)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, bad("%v", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, bad("not a PEM PRIVATE KEY")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, bad("%v", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, bad("a %T, not an Ed25519 key", k)
	}
	return ek, nil
}

// makeSigningKey makes a new key at path: written whole to a file of its
// own, then linked at path, so that no reader sees half a key; a key
// another process linked there first is the one read.
func makeSigningKey(path string) (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kube.signing_key: %w", err)
	}
	if err := hostfs.TrustedDir(dir); err != nil {
		return nil, fmt.Errorf("kube.signing_key %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".signing-*.key")
	if err != nil {
		return nil, fmt.Errorf("kube.signing_key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if serr := tmp.Sync(); err == nil {
		err = serr
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		return readSigningKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("kube.signing_key: %w", err)
	}
	return k, nil
}

// EnsureTrust makes the namespace's trust ConfigMap hold key's public
// half: it makes the ConfigMap when there is none, and refuses one that
// holds another key (hosts that drive one namespace share one key; to
// change it, delete the ConfigMap, and the pods that trust the old key
// go with their next start).
func EnsureTrust(ctx context.Context, core kubernetes.Interface, cfg Config, key ed25519.PrivateKey) error {
	cfg = cfg.Defaults()
	pub := key.Public().(ed25519.PublicKey)
	cms := core.CoreV1().ConfigMaps(cfg.Namespace)
	immutable := true // no update can change the key pods trust; a new key means a new ConfigMap
	cm, err := cms.Get(ctx, cfg.TrustConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cfg.TrustConfigMap, Namespace: cfg.Namespace, Labels: map[string]string{LabelManaged: managedBy}},
			Data:       map[string]string{TrustKey: podtoken.PublicText(pub)},
			Immutable:  &immutable,
		}
		if _, err = cms.Create(ctx, cm, metav1.CreateOptions{}); err == nil || !apierrors.IsAlreadyExists(err) {
			return explainIf(err, "create", "configmaps", cfg.Namespace)
		}
		cm, err = cms.Get(ctx, cfg.TrustConfigMap, metav1.GetOptions{}) // another host made it first
	}
	if err != nil {
		return explain(err, "get", "configmaps", cfg.Namespace)
	}
	if have, err := podtoken.ParsePublic(cm.Data[TrustKey]); err != nil || !have.Equal(pub) {
		return &sandbox.InvalidError{Reason: fmt.Sprintf("the ConfigMap %s/%s trusts another key than kube.signing_key's: every host of a namespace must use the same key (mount one Secret as kube.signing_key), or delete the ConfigMap to trust this one", cfg.Namespace, cfg.TrustConfigMap)}
	}
	return nil
}

func explainIf(err error, verb, resource, ns string) error {
	if err == nil {
		return nil
	}
	return explain(err, verb, resource, ns)
}

// Backend registers kube mode: ranked below the modes that run on this
// machine, so that auto picks it only where none of them can run (a host
// that itself runs in a pod).
func Backend() sandbox.Backend {
	return sandbox.Backend{
		Name: Mode, Rank: 5, Isolating: true,
		New: func(env sandbox.Env) (sandbox.Manager, error) {
			// Every command that looks for a neuron builds this mode's
			// manager when the modes before it have no such neuron: a
			// cluster that does not answer costs it at most this.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := NewFromSettings(ctx, env.Layout.Home)
			if err != nil {
				return nil, err
			}
			m.Layout = env.Layout
			m.AgentBinary = env.AgentBinary
			m.EgressUpstreamCA = env.EgressUpstreamCA
			return m, nil
		},
		SelfCheck: SelfCheck,
	}
}

// NewFromSettings builds the Manager from the environment's settings:
// the cluster's clients (agent-sandbox's when its CRDs are served), the
// signing key, and the trust ConfigMap.
func NewFromSettings(ctx context.Context, home string) (*Manager, error) {
	s, err := SettingsFromEnv(home)
	if err != nil {
		return nil, err
	}
	rc, err := RESTConfig(s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cl, err := NewCluster(ctx, rc, s.Config)
	if err != nil {
		return nil, err
	}
	if why := noWarmPool(cl); why != "" {
		return nil, &sandbox.UnavailableError{Mode: Mode, Reason: why}
	}
	key, err := LoadSigningKey(s.SigningKey)
	if err != nil {
		return nil, err
	}
	if err := EnsureTrust(ctx, cl.Core, s.Config, key); err != nil {
		return nil, err
	}
	m := &Manager{Cluster: cl, Key: key}
	if s.PortForward {
		if m.Forward, err = NewForwarder(rc); err != nil {
			return nil, &sandbox.UnavailableError{Mode: Mode, Reason: err.Error()}
		}
	}
	return m, nil
}

// NewCluster makes the clients of the cluster rc reaches, and finds
// whether it serves agent-sandbox's Sandboxes (else neurons are pods).
func NewCluster(ctx context.Context, rc *rest.Config, cfg Config) (*Cluster, error) {
	rc = withRate(rest.CopyConfig(rc))
	rc.UserAgent = "nsys-cortex"
	if rc.Timeout == 0 {
		rc.Timeout = 30 * time.Second
	}
	// The built-in kinds in protobuf, as the cluster's own controllers
	// ask for them: a list of 1000 pods decodes several times faster.
	crc := rest.CopyConfig(rc)
	crc.ContentType = runtime.ContentTypeProtobuf
	crc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	core, err := kubernetes.NewForConfig(crc)
	if err != nil {
		return nil, &sandbox.UnavailableError{Mode: Mode, Reason: err.Error()}
	}
	cl := &Cluster{Core: core, Config: cfg}
	served, err := serves(core, sbv1.GroupVersion.String(), "sandboxes")
	if err != nil {
		return nil, &sandbox.UnavailableError{Mode: Mode, Reason: fmt.Sprintf("the API server at %s: %v", rc.Host, err)}
	}
	if served {
		// Custom resources have no protobuf form: JSON, whatever the
		// configuration asks for the built-in kinds.
		arc := rest.CopyConfig(rc)
		arc.ContentType, arc.AcceptContentTypes = "application/json", "application/json"
		if cl.Agents, err = agents.NewForConfig(arc); err != nil {
			return nil, &sandbox.UnavailableError{Mode: Mode, Reason: err.Error()}
		}
		// Its extensions (claims and warm pools), where they are served.
		claims, err := serves(core, extv1.GroupVersion.String(), "sandboxclaims")
		if err != nil {
			return nil, &sandbox.UnavailableError{Mode: Mode, Reason: fmt.Sprintf("the API server at %s: %v", rc.Host, err)}
		}
		if claims {
			if cl.Claims, err = extclient.NewForConfig(arc); err != nil {
				return nil, &sandbox.UnavailableError{Mode: Mode, Reason: err.Error()}
			}
		}
	}
	return cl, nil
}

// noWarmPool is why kube.warm_pool cannot be had ("": it can).
func noWarmPool(cl *Cluster) string {
	if cl.Config.WarmPool == 0 || cl.Claims != nil {
		return ""
	}
	return fmt.Sprintf("kube.warm_pool is %d, and the cluster does not serve agent-sandbox's SandboxClaims and SandboxWarmPools (its extensions): "+
		"install them (docs/kube.md, \"Warm pools\"), or set kube.warm_pool = 0", cl.Config.WarmPool)
}

// serves asks the API server whether it serves resource of group
// version gv.
func serves(core kubernetes.Interface, gv, resource string) (bool, error) {
	list, err := core.Discovery().ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// SelfCheck reports whether kube mode can run: configured, the cluster
// reachable, the namespace there, and which objects neurons are made of.
func SelfCheck(ctx context.Context, env sandbox.Env) sandbox.Check {
	c := sandbox.Check{Mode: Mode}
	conf := sandbox.CheckItem{Name: "configured (kube.image)"}
	c.Items = append(c.Items, conf)
	s, err := SettingsFromEnv(env.Layout.Home)
	if err != nil {
		c.Items[0].Detail = err.Error()
		c.Summary = err.Error()
		return c
	}
	c.Items[0].OK, c.Items[0].Detail = true, s.Config.Image
	api := sandbox.CheckItem{Name: "the API server"}
	rc, err := RESTConfig(s.Kubeconfig)
	if err != nil {
		api.Detail = err.Error()
		c.Items = append(c.Items, api)
		c.Summary = "no way to the cluster"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rc = rest.CopyConfig(rc)
	rc.Timeout = 10 * time.Second
	cl, err := NewCluster(ctx, rc, s.Config)
	if err != nil {
		api.Detail = err.Error()
		c.Items = append(c.Items, api)
		c.Summary = "the cluster cannot be reached"
		return c
	}
	api.OK, api.Detail = true, rc.Host
	c.Items = append(c.Items, api)
	ns := sandbox.CheckItem{Name: "namespace " + s.Config.Namespace}
	_, err = cl.Core.CoreV1().Namespaces().Get(ctx, s.Config.Namespace, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		// Namespaces are cluster-wide, and deploy/kubernetes grants the
		// host nothing cluster-wide: what it needs is its pods.
		_, err = cl.Core.CoreV1().Pods(s.Config.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			ns.OK, ns.Detail = true, "its pods can be listed (the namespace itself may not be read: no cluster-wide grant)"
		} else {
			ns.Detail = explain(err, "list", "pods", s.Config.Namespace).Error()
		}
	} else if err != nil {
		ns.Detail = explain(err, "get", "namespaces", "").Error()
	} else {
		ns.OK, ns.Detail = true, "there"
	}
	c.Items = append(c.Items, ns)
	objs := sandbox.CheckItem{Name: "agent-sandbox's Sandboxes", OK: true, Detail: "served: a neuron is a Sandbox"}
	if cl.Agents == nil {
		objs.Detail = "not served: a neuron is a Pod and a PersistentVolumeClaim (install agent-sandbox for suspend and warm pools)"
	}
	c.Items = append(c.Items, objs)
	if !ns.OK {
		c.Summary = "namespace " + s.Config.Namespace + ": " + ns.Detail
		return c
	}
	rcs := runtimeClasses(ctx, cl, s.Config.RuntimeClass)
	adm := admitted(ctx, cl, s.Config)
	c.Items = append(c.Items, rcs, adm)
	keys, shared := sharedKeys(cl, s.Config.HostNamespace)
	if shared {
		c.Items = append(c.Items, keys)
	}
	chats := sandbox.CheckItem{OK: true}
	if on, _ := strconv.ParseBool(os.Getenv(EnvChatSessions)); on {
		chats = chatSessionsItem(ctx, cl, s.Config.HostNamespace)
		c.Items = append(c.Items, chats)
	}
	grants := hostGrantsItem(ctx, cl, rc, s.Config.HostNamespace)
	c.Items = append(c.Items, grants)
	fwd := sandbox.CheckItem{OK: true}
	if s.PortForward {
		fwd = portForwardAllowed(ctx, cl, s.Config.Namespace)
		c.Items = append(c.Items, fwd)
	}
	netpol := networkItem(ctx, cl, s)
	c.Items = append(c.Items, netpol)
	warm := sandbox.CheckItem{OK: true}
	if s.Config.WarmPool > 0 {
		warm = warmPoolItem(ctx, cl)
		c.Items = append(c.Items, warm)
	}
	if !grants.OK { // a way to the key every agent trusts: said first
		c.Summary = grants.Detail
		return c
	}
	if !warm.OK {
		c.Summary = warm.Detail
		return c
	}
	if !adm.OK {
		c.Summary = adm.Detail
		return c
	}
	if !fwd.OK {
		c.Summary = fwd.Detail
		return c
	}
	if shared && !keys.OK {
		c.Summary = keys.Detail
		return c
	}
	if !chats.OK {
		c.Summary = chats.Detail
		return c
	}
	if !rcs.OK {
		c.Summary = rcs.Detail
		return c
	}
	if !netpol.OK {
		c.Summary = netpol.Detail
		return c
	}
	c.OK, c.Summary = true, "ready ("+rc.Host+")"
	return c
}

// warmPoolItem says whether the cluster serves warm pools, and how many
// of the namespace's warm neurons are ready.
func warmPoolItem(ctx context.Context, cl *Cluster) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "warm pool (kube.warm_pool)"}
	if why := noWarmPool(cl); why != "" {
		it.Detail = why
		return it
	}
	cfg := cl.Config.Defaults()
	p, err := cl.Claims.ExtensionsV1beta1().SandboxWarmPools(cfg.Namespace).Get(ctx, WarmPoolName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		it.OK, it.Detail = true, fmt.Sprintf("not made yet: the first create makes SandboxWarmPool %s/%s of %d", cfg.Namespace, WarmPoolName, cfg.WarmPool)
	case err != nil:
		it.Detail = explain(err, "get", "sandboxwarmpools.extensions.agents.x-k8s.io", cfg.Namespace).Error()
	default:
		it.OK, it.Detail = true, fmt.Sprintf("%d of %d warm neurons ready (SandboxWarmPool %s/%s)", p.Status.ReadyReplicas, cfg.WarmPool, cfg.Namespace, WarmPoolName)
	}
	return it
}

// chatSessionsItem says whether this identity may keep chat sessions in
// the namespace's Secrets (kube.chat_sessions): list them, and make,
// rewrite and remove them (asked of the API server, not tried).
func chatSessionsItem(ctx context.Context, cl *Cluster, namespace string) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "chat sessions (kube.chat_sessions): Secrets of " + namespace}
	l, err := cl.Core.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=true"})
	if err != nil {
		it.Detail = explain(err, "list", "secrets", namespace).Error()
		return it
	}
	for _, verb := range []string{"get", "create", "patch", "delete"} {
		r, err := cl.Core.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Resource: "secrets"}},
		}, metav1.CreateOptions{})
		switch {
		case err != nil:
			it.Detail = fmt.Sprintf("asking whether this identity may %s secrets in %s: %v", verb, namespace, err)
			return it
		case !r.Status.Allowed:
			it.Detail = fmt.Sprintf("this identity may not %s secrets in namespace %s, which kube.chat_sessions keeps sessions in: grant get, list, create, patch and delete on secrets (deploy/kubernetes/rbac.yaml), or turn kube.chat_sessions off", verb, namespace)
			return it
		}
	}
	it.OK, it.Detail = true, fmt.Sprintf("allowed; %d sessions kept", len(l.Items))
	return it
}

// portForwardAllowed asks the API server whether this identity may
// open port-forwards to the namespace's pods (create pods/portforward,
// what kubectl port-forward needs), which kube.port_forward carries
// every channel over.
func portForwardAllowed(ctx context.Context, cl *Cluster, namespace string) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "port-forward (kube.port_forward)"}
	r, err := cl.Core.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: namespace, Verb: "create", Resource: "pods", Subresource: "portforward"}},
	}, metav1.CreateOptions{})
	switch {
	case err != nil:
		it.Detail = fmt.Sprintf("asking whether this identity may create pods/portforward in %s: %v", namespace, err)
	case !r.Status.Allowed:
		it.Detail = fmt.Sprintf("this identity may not create pods/portforward in namespace %s, which every channel goes through with kube.port_forward: grant it (kubectl port-forward's right), or reach the pods' IPs from inside the cluster", namespace)
	default:
		it.OK, it.Detail = true, "allowed: the channel goes through the API server and the pod's kubelet (for development; docs/kube.md)"
	}
	return it
}

// sharedKeys checks the Secret of the API keys the replicas share, when
// kube.api_keys names one (shared: it does): it must be there, and
// readable, since a host that cannot read it refuses every key.
func sharedKeys(cl *Cluster, namespace string) (it sandbox.CheckItem, shared bool) {
	name := os.Getenv(EnvAPIKeys)
	if name == "" {
		return it, false
	}
	it.Name = "API keys (kube.api_keys): Secret " + namespace + "/" + name
	if err := CheckName(name); err != nil {
		it.Detail = fmt.Sprintf("kube.api_keys %q: %v", name, err)
		return it, true
	}
	sk := &SecretKeys{Core: cl.Core, Namespace: namespace, Name: name}
	b, v, err := sk.Load()
	switch {
	case err != nil:
		it.Detail = err.Error()
	case v == "":
		it.Detail = "not there: token create makes it where the host may create Secrets; deploy/kubernetes's api-keys.yaml makes it empty, so that the host needs only get and update on it"
	default:
		it.OK, it.Detail = true, fmt.Sprintf("readable (%d bytes)", len(b))
	}
	return it, true
}

// runtimeClasses says which RuntimeClasses the cluster offers and whether
// kube.runtime_class (want) is one. Reading them takes a cluster-wide
// grant deploy/kubernetes does not give; without it, the admission dry
// run is what checks want.
func runtimeClasses(ctx context.Context, cl *Cluster, want string) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "RuntimeClass (kube.runtime_class)", OK: true}
	list, err := cl.Core.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	offered := "not readable here (no cluster-wide grant to list RuntimeClasses)"
	var names []string
	if err == nil {
		for _, rc := range list.Items {
			names = append(names, rc.Name+" ("+rc.Handler+")")
		}
		offered = "the cluster offers " + strings.Join(names, ", ")
		if len(names) == 0 {
			offered = "the cluster offers none"
		}
	}
	switch {
	case want == "":
		it.Detail = "none set: the pods run under the nodes' default runtime, on the node's kernel; " + offered
	case err != nil:
		it.Detail = want + ": " + offered + "; the dry run below checks it"
	case !slices.ContainsFunc(list.Items, func(rc nodev1.RuntimeClass) bool { return rc.Name == want }):
		it.OK, it.Detail = false, want+" is not in the cluster: "+offered
	default:
		it.Detail = want + ": " + offered
	}
	return it
}

// admitted creates a neuron's pod as a dry run: whatever the namespace's
// admission refuses (the RuntimeClass, Pod Security, a quota, a policy
// engine's rules) a real create would be refused too.
func admitted(ctx context.Context, cl *Cluster, cfg Config) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "a neuron's pod admitted (dry run)"}
	pod, _, err := Fallback(cfg, Neuron{ID: "doctor-dry-run"})
	if err != nil {
		it.Detail = err.Error()
		return it
	}
	_, err = cl.Core.CoreV1().Pods(cfg.Defaults().Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		it.Detail = explain(err, "create", "pods", cfg.Defaults().Namespace).Error()
		return it
	}
	it.OK, it.Detail = true, "the namespace's admission takes it"
	return it
}
