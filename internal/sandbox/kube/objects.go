// Package kube is the Kubernetes mode's object plane (docs/kube.md): the
// objects one neuron is made of, how their state reads as a neuron's, and
// their creation and removal through the API server, leaving nothing
// behind when a step fails. A neuron is an agent-sandbox Sandbox
// (agents.x-k8s.io/v1beta1), or, on clusters without its CRDs, a Pod and a
// PersistentVolumeClaim built from the same PodSpec.
//
// client-go's packages take ~15,000 allocations to initialise, so this
// package is linked into the full program only (internal/cli/split.go),
// never the light one.
package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The labels and names the mode gives its objects.
const (
	// LabelID carries the neuron's id on every object of it.
	LabelID = "neuron.nsys-cortex/id"
	// LabelRole marks the neuron pods, which the namespace's
	// NetworkPolicies select ("neuron").
	LabelRole = "neuron.nsys-cortex/role"
	// LabelManaged marks every object the mode made, for its informer.
	LabelManaged = "app.kubernetes.io/managed-by"
	managedBy    = "nsys-cortex"
	// AgentContainer is the neuron's one container.
	AgentContainer = "agent"
	// homeVolume is the volume claim template of the neuron's home (the
	// persistent part of the neuron, as the overlay is locally).
	homeVolume = "home"
	// trustVolume holds the public key that verifies the host's tokens.
	trustVolume = "trust"
)

// The fixed, non-root uid and gid the agent and every command run as.
const (
	NeuronUID = 65532
	NeuronGID = 65532
)

// Config is the mode's settings (config keys kube.*; docs/kube.md).
type Config struct {
	// Namespace holds the neurons (kube.namespace).
	Namespace string
	// HostNamespace is where the hosts run and keep what is theirs
	// alone: the shared API keys' Secret and the chat sessions' Secrets
	// (kube.host_namespace; "": Namespace). Apart from Namespace, a pod
	// made in the neurons' namespace, by whoever may make one there, can
	// mount none of the hosts' Secrets, and the neurons' NetworkPolicies
	// take connections only from host pods of this namespace.
	HostNamespace string
	// Image is the neuron image: a root filesystem with the agent at
	// AgentPath (kube.image; nsys-cortex image build makes one).
	Image string
	// ImagePullPolicy is the image's pull policy ("" lets Kubernetes
	// choose).
	ImagePullPolicy corev1.PullPolicy
	// RuntimeClass runs the pods under a RuntimeClass (gVisor, Kata;
	// kube.runtime_class); "" is the cluster's default runtime.
	RuntimeClass string
	// AgentPort is the TCP port the agent listens on in the pod.
	AgentPort int32
	// HomeSize is the size of each neuron's home volume (kube.home_size).
	HomeSize resource.Quantity
	// StorageClass is the home volumes' class ("" the cluster's default).
	StorageClass string
	// TrustConfigMap holds the public key (key TrustKey) that the agent
	// verifies the host's tokens with (kube.trust_configmap).
	TrustConfigMap string
	// TmpSize bounds the writable /tmp (an emptyDir; the root filesystem
	// is read-only).
	TmpSize resource.Quantity
	// OpenNetwork runs neurons on a cluster whose network plugin does
	// not enforce NetworkPolicy, where they reach the network
	// (kube.allow_open_network); otherwise a create there is refused
	// (see ProbeNetwork).
	OpenNetwork bool
	// WarmPool is how many warm neurons agent-sandbox's SandboxWarmPool
	// keeps ready (kube.warm_pool); 0: none, every create is cold.
	WarmPool int32
}

// TrustKey is the key of the trust ConfigMap that holds the public key.
const TrustKey = "token.pub"

// AgentPath is where the image carries the agent.
const AgentPath = "/usr/local/bin/cortex-agent"

// Defaults fills the settings left empty.
func (c Config) Defaults() Config {
	if c.Namespace == "" {
		c.Namespace = "nsys-cortex"
	}
	if c.HostNamespace == "" {
		c.HostNamespace = c.Namespace
	}
	if c.AgentPort == 0 {
		c.AgentPort = 7070
	}
	if c.HomeSize.IsZero() {
		c.HomeSize = resource.MustParse("10Gi")
	}
	if c.TmpSize.IsZero() {
		c.TmpSize = resource.MustParse("1Gi")
	}
	if c.TrustConfigMap == "" {
		c.TrustConfigMap = "nsys-cortex-trust"
	}
	return c
}

// Neuron is what one neuron's objects are made from.
type Neuron struct {
	ID     string
	Labels labels.Set
	// Env is the neuron's environment (KEY=VALUE), checked already.
	Env    []string
	Limits sandbox.Limits
	// Deadline, when set, is when the cluster ends the neuron (the
	// Sandbox's shutdownTime), Timeout after the create.
	Deadline *time.Time
	Timeout  time.Duration
	// OnTimeout is what the deadline does: wipe deletes the Sandbox (and
	// with it the home), any other stops the neuron, its home kept.
	OnTimeout sandbox.TimeoutAction
	// Egress, when set, is the neuron's allow-list (network egress): its
	// agent listens on EgressListen for its programs, and a host holds
	// the tunnel that takes their connections to the enforcing proxy.
	// Nil: the neuron reaches nothing.
	Egress []string
	// Secrets, when set, are the neuron's secrets (with Egress): their
	// placeholders go into its environment, their authority's certificate
	// to its agent, and the rest, sealed, into AnnotationSecrets.
	Secrets *neuronSecrets
	// TrustKeySHA256, when set, pins the trust key the pod's agent takes
	// (podtoken.Fingerprint of the host's key): a trust ConfigMap made
	// again with another key is refused by the pods made after.
	TrustKeySHA256 string
}

// CheckID refuses an id Kubernetes cannot name objects by: kube mode's
// ids are DNS labels (lower-case letters, digits and '-', at most 61
// characters, so that "n-" and the id is one too).
func CheckID(id string) error {
	if err := ids.Validate(id); err != nil {
		return &sandbox.InvalidError{Reason: err.Error()}
	}
	if errs := validation.IsDNS1123Label(ObjectName(id)); len(errs) > 0 {
		return &sandbox.InvalidError{Reason: fmt.Sprintf("neuron id %q: in kube mode an id is a DNS label (lower-case letters, digits and '-', at most 61 characters), since Kubernetes names the neuron's objects by it", id)}
	}
	return nil
}

// ObjectName is the name of neuron id's Sandbox (and of its Pod on the
// fallback path): "n-" and the id, a DNS label since ids are.
func ObjectName(id string) string { return "n-" + id }

// HomeClaimName is the name of neuron id's home volume claim: what the
// agent-sandbox controller names a claim template's claim
// (<template>-<sandbox>), and the fallback path names it the same.
func HomeClaimName(id string) string { return homeVolume + "-" + ObjectName(id) }

// objectLabels are the labels of every object of neuron n: its own
// labels (those that are Kubernetes label keys too), then the mode's,
// which a neuron's labels cannot override.
func objectLabels(n Neuron) map[string]string {
	out := map[string]string{}
	for k, v := range n.Labels {
		// The mode's own keys, and app.kubernetes.io's (what Cortex's host
		// pods are selected by), are not a neuron's to set.
		if !modeLabel(k) {
			out[k] = v
		}
	}
	out[LabelID] = n.ID
	out[LabelManaged] = managedBy
	return out
}

// modeLabel says whether label key k is the mode's (neuron.nsys-cortex/),
// app.kubernetes.io's (what Cortex's host pods are selected by) or
// agent-sandbox's: never a neuron's own.
func modeLabel(k string) bool {
	return strings.HasPrefix(k, "neuron.nsys-cortex/") || strings.HasPrefix(k, "app.kubernetes.io/") || strings.HasPrefix(k, "agents.x-k8s.io/")
}

// Workspace is a neuron pod's working directory, on its home.
const Workspace = "/home/agent/workspace"

// EgressListen is where a neuron with network egress finds its proxy: its
// agent's listener on the pod's loopback (cortex-agent -egress).
const EgressListen = "127.0.0.1:3128"

// egressCAVolume is the pod's volume for its egress authority (secrets).
const egressCAVolume = "egress-ca"

// AnnotationEgress, on a neuron pod, is its allow-list (a JSON array of
// rules; internal/protocol/allowlist): what the proxy of the host that
// holds its tunnel lets through. Only the pod's makers write it: the
// neuron has no way to the API server.
const AnnotationEgress = "neuron.nsys-cortex/egress"

// podAnnotations are the annotations of neuron n's pod (nil: none).
func podAnnotations(n Neuron) map[string]string {
	if n.Egress == nil {
		return nil
	}
	rules, _ := json.Marshal(n.Egress) // strings: never fails
	a := map[string]string{AnnotationEgress: string(rules)}
	if n.Secrets != nil {
		a[AnnotationSecrets] = n.Secrets.Annotation
	}
	return a
}

// podEgress is the allow-list of pod, from its annotation: false when the
// pod has none (a neuron that reaches nothing).
func podEgress(pod *corev1.Pod) ([]string, bool, error) {
	v, ok := pod.Annotations[AnnotationEgress]
	if !ok {
		return nil, false, nil
	}
	var rules []string
	if err := json.Unmarshal([]byte(v), &rules); err != nil {
		return nil, true, fmt.Errorf("pod %s's annotation %s: %w", pod.Name, AnnotationEgress, err)
	}
	if _, err := allowlist.Parse(rules); err != nil {
		return nil, true, fmt.Errorf("pod %s's annotation %s: %w", pod.Name, AnnotationEgress, err)
	}
	return rules, true, nil
}

// PodSpec is the pod of neuron n: the agent alone, hardened (non-root,
// no capabilities, no privilege escalation, read-only root, the
// runtime's default seccomp profile, no service-account token, no service
// links), its home on the claim homeClaim, its resources from n's limits.
// One pure function for both paths, golden-tested.
func PodSpec(cfg Config, n Neuron, homeClaim string) corev1.PodSpec {
	cfg = cfg.Defaults()
	port := strconv.Itoa(int(cfg.AgentPort))
	env := []corev1.EnvVar{}
	vars := n.Env
	if !slices.ContainsFunc(vars, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		// The home volume: what a neuron keeps across destroy and create
		// ($HOME/.cache, dotfiles) is there, not on the read-only root.
		vars = append(slices.Clip(vars), "HOME=/home/agent")
	}
	if n.Egress != nil {
		vars = append(slices.Clip(vars), sandbox.ProxyEnv(EgressListen, n.ID)...)
	}
	if n.Secrets != nil {
		vars = append(slices.Clip(vars), n.Secrets.Env...)
		vars = append(vars, boot.EgressCAEnv()...)
		vars = append(vars, boot.EnvEgressCA+"="+n.Secrets.CACert)
	}
	for _, kv := range slices.Sorted(slices.Values(vars)) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	spec := corev1.PodSpec{
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		RestartPolicy:                 corev1.RestartPolicyNever, // the agent's exit is the neuron's death
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:        ptr.To(true),
			RunAsUser:           ptr.To[int64](NeuronUID),
			RunAsGroup:          ptr.To[int64](NeuronGID),
			FSGroup:             ptr.To[int64](NeuronGID),
			FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:            AgentContainer,
			Image:           cfg.Image,
			ImagePullPolicy: cfg.ImagePullPolicy,
			Command:         []string{AgentPath},
			Args: []string{
				"--listen=:" + port,
				"--trust-key=/run/nsys-cortex/trust/" + TrustKey,
				"--pod-info=/run/nsys-cortex/pod",
				"--id=" + n.ID,
				// Where commands run and relative paths start: the pod's
				// working directory, on the home (the agent's own default,
				// its root, is the read-only "/").
				"--workdir=" + Workspace,
			},
			Env:        env,
			WorkingDir: Workspace,
			// The agent's refusal to start (a trust key it is not
			// pinned to) is its log's last lines.
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			Ports:                    []corev1.ContainerPort{{Name: "agent", ContainerPort: cfg.AgentPort, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(cfg.AgentPort)}},
				PeriodSeconds: 1,
			},
			Resources:       resources(n.Limits),
			SecurityContext: hardened(),
			VolumeMounts: []corev1.VolumeMount{
				{Name: homeVolume, MountPath: "/home/agent"},
				{Name: "tmp", MountPath: "/tmp"},
				{Name: trustVolume, MountPath: "/run/nsys-cortex/trust", ReadOnly: true},
				{Name: "pod", MountPath: "/run/nsys-cortex/pod", ReadOnly: true},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: homeVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: homeClaim}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(cfg.TmpSize)}}},
			{Name: trustVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cfg.TrustConfigMap},
				Items:                []corev1.KeyToPath{{Key: TrustKey, Path: TrustKey}},
				DefaultMode:          ptr.To[int32](0o444),
			}}},
			// What the agent checks a token's claims against: its own pod.
			{Name: "pod", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				DefaultMode: ptr.To[int32](0o444),
				Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
					{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
					{Path: "uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				},
			}}},
		},
	}
	if cfg.RuntimeClass != "" {
		spec.RuntimeClassName = ptr.To(cfg.RuntimeClass)
	}
	if n.TrustKeySHA256 != "" {
		c := &spec.Containers[0]
		c.Args = append(c.Args, "--trust-key-sha256="+n.TrustKeySHA256)
	}
	if n.Egress != nil {
		c := &spec.Containers[0]
		c.Args = append(c.Args, "--egress="+EgressListen)
	}
	if n.Secrets != nil {
		// Where the agent writes the authority and the bundle the
		// neuron's programs trust (the root is read-only).
		c := &spec.Containers[0]
		c.Args = append(c.Args, "--egress-ca="+boot.EgressCADir)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: egressCAVolume, MountPath: boot.EgressCADir})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: egressCAVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("16Mi"))}}})
	}
	return spec
}

// Hardened says what of spec is not as PodSpec makes every neuron pod
// (nil: nothing): non-root as NeuronUID, the runtime's default seccomp
// profile, no service-account token, no host namespaces, the agent alone
// (no init or ephemeral containers), no privilege, escalation or added
// capability, every one dropped, a read-only root, no host path or Secret
// mounted, cfg's RuntimeClass where it sets one, and the agent pinned to
// the trust key of fingerprint pin. What a host checks before it sends a
// pod its tokens: a Sandbox, or the warm pool's SandboxTemplate, that
// someone with rights in the namespace weakened is refused, not served.
func Hardened(cfg Config, spec corev1.PodSpec, pin string) error {
	psc := spec.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != NeuronUID:
		return fmt.Errorf("the pod does not run as uid %d, non-root", NeuronUID)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		return errors.New("the pod's seccomp profile is not the runtime's default")
	case spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken:
		return errors.New("the pod may mount a service-account token")
	case spec.HostNetwork || spec.HostPID || spec.HostIPC:
		return errors.New("the pod shares a namespace of its node")
	case len(spec.Containers) != 1 || len(spec.InitContainers) != 0 || len(spec.EphemeralContainers) != 0 || spec.Containers[0].Name != AgentContainer:
		return errors.New("the pod runs other containers than the agent")
	case cfg.RuntimeClass != "" && (spec.RuntimeClassName == nil || *spec.RuntimeClassName != cfg.RuntimeClass):
		return fmt.Errorf("the pod does not run under RuntimeClass %s (kube.runtime_class)", cfg.RuntimeClass)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil && *sc.Privileged:
		return errors.New("the agent's container may be privileged, or escalate")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		return errors.New("the agent's root filesystem is writable")
	case sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		return errors.New("the agent's container keeps or adds capabilities")
	case sc.RunAsUser != nil && *sc.RunAsUser != NeuronUID || sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
		return errors.New("the agent's container runs as another user")
	case !slices.Contains(c.Args, "--trust-key-sha256="+pin):
		return errors.New("the agent is not pinned to this host's trust key")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil || v.Secret != nil {
			return fmt.Errorf("volume %s is a host path or a Secret", v.Name)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil || src.Secret != nil || src.ClusterTrustBundle != nil || src.PodCertificate != nil {
					return fmt.Errorf("volume %s projects a token, a Secret or a credential", v.Name)
				}
			}
		}
	}
	return nil
}

// hardened is the security context of every container kube mode makes:
// no privilege escalation, a read-only root, non-root, no capabilities,
// the runtime's default seccomp profile.
func hardened() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// resources are a neuron's limits as a container's: requests equal to
// limits, so the pod's quality of service is Guaranteed where all are set.
func resources(l sandbox.Limits) corev1.ResourceRequirements {
	r := corev1.ResourceList{}
	if l.CPUs > 0 {
		r[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUs*1000+0.5), resource.DecimalSI)
	}
	if l.MemoryBytes > 0 {
		r[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
	}
	if l.DiskBytes > 0 {
		r[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(l.DiskBytes, resource.BinarySI)
	}
	if len(r) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Limits: r, Requests: maps.Clone(r)}
}

// homeClaimSpec is the home volume's claim.
func homeClaimSpec(cfg Config) corev1.PersistentVolumeClaimSpec {
	s := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: cfg.HomeSize}},
	}
	if cfg.StorageClass != "" {
		s.StorageClassName = ptr.To(cfg.StorageClass)
	}
	return s
}

// Sandbox is neuron n's agent-sandbox Sandbox: the pod, its home as a
// volume claim template (the controller makes the claim and keeps it
// while the Sandbox lives), running.
func Sandbox(cfg Config, n Neuron) (*sbv1.Sandbox, error) {
	if err := CheckID(n.ID); err != nil {
		return nil, err
	}
	cfg = cfg.Defaults()
	l := objectLabels(n)
	sb := &sbv1.Sandbox{
		TypeMeta:   metav1.TypeMeta{APIVersion: sbv1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(n.ID), Namespace: cfg.Namespace, Labels: l},
		Spec: sbv1.SandboxSpec{
			SandboxBlueprint: sbv1.SandboxBlueprint{
				PodTemplate: sbv1.PodTemplate{
					ObjectMeta: sbv1.PodMetadata{Labels: podLabels(l), Annotations: podAnnotations(n)},
					Spec:       PodSpec(cfg, n, HomeClaimName(n.ID)),
				},
				VolumeClaimTemplates: []sbv1.PersistentVolumeClaimTemplate{{
					EmbeddedObjectMetadata: sbv1.EmbeddedObjectMetadata{Name: homeVolume, Labels: map[string]string{LabelID: n.ID, LabelManaged: managedBy}},
					Spec:                   homeClaimSpec(cfg),
				}},
				Service: ptr.To(false), // the host dials the pod's IP
			},
			OperatingMode: sbv1.SandboxOperatingModeRunning,
		},
	}
	if n.Deadline != nil {
		sb.Spec.ShutdownTime = &metav1.Time{Time: WholeSeconds(*n.Deadline)}
		sb.Spec.ShutdownPolicy = ptr.To(shutdownPolicy(n.OnTimeout))
	}
	return sb, nil
}

// WholeSeconds is t as the API keeps a time: in whole seconds, rounded up
// (a deadline never comes sooner than asked).
func WholeSeconds(t time.Time) time.Time {
	w := t.UTC().Truncate(time.Second)
	if w.Before(t) {
		w = w.Add(time.Second)
	}
	return w
}

// shutdownPolicy is what agent-sandbox's controller does at a Sandbox's
// shutdown time for on-timeout action a: delete it (a wipe: the claims
// it owns go with it), or end its pod and keep it (a stop).
func shutdownPolicy(a sandbox.TimeoutAction) sbv1.ShutdownPolicy {
	if a == sandbox.OnTimeoutWipe {
		return sbv1.ShutdownPolicyDelete
	}
	return sbv1.ShutdownPolicyRetain
}

// podLabels are a neuron pod's labels: the object's, and the role its
// NetworkPolicies select.
func podLabels(l map[string]string) map[string]string {
	p := maps.Clone(l)
	p[LabelRole] = "neuron"
	return p
}

// Fallback is neuron n as a plain Pod and its home's claim, for clusters
// without agent-sandbox's CRDs: the same PodSpec.
func Fallback(cfg Config, n Neuron) (*corev1.Pod, *corev1.PersistentVolumeClaim, error) {
	if err := CheckID(n.ID); err != nil {
		return nil, nil, err
	}
	cfg = cfg.Defaults()
	l := objectLabels(n)
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: HomeClaimName(n.ID), Namespace: cfg.Namespace, Labels: map[string]string{LabelID: n.ID, LabelManaged: managedBy}},
		Spec:       homeClaimSpec(cfg),
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(n.ID), Namespace: cfg.Namespace, Labels: podLabels(l), Annotations: podAnnotations(n)},
		Spec:       PodSpec(cfg, n, pvc.Name),
	}
	if n.Deadline != nil {
		// A plain pod has no shutdown time: its kubelet ends it
		// Timeout after it started (activeDeadlineSeconds), and the
		// deadline is kept where every host reads it.
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[AnnotationDeadline] = n.Deadline.UTC().Format(time.RFC3339)
		pod.Spec.ActiveDeadlineSeconds = ptr.To(int64(max((n.Timeout+time.Second-1)/time.Second, 1)))
	}
	return pod, pvc, nil
}

// AnnotationDeadline carries a fallback neuron's deadline.
const AnnotationDeadline = "neuron.nsys-cortex/deadline"

// Check refuses a configuration the mode cannot run with.
func (c Config) Check() error {
	c = c.Defaults()
	switch {
	case c.Image == "":
		return fmt.Errorf("kube.image is not set: the neuron image (nsys-cortex image build; docs/kube.md says how it reaches the cluster's registry)")
	case c.AgentPort < 1 || c.AgentPort > 65535:
		return fmt.Errorf("kube.agent_port %d: 1-65535", c.AgentPort)
	}
	return nil
}

// LabelHost marks Cortex's own pods (the host Deployment's), the only
// ones a neuron pod takes connections from (of the hosts' namespace).
const LabelHost = "app.kubernetes.io/name"

// hostName is LabelHost's value on Cortex's pods.
const hostName = "nsys-cortex"

// NetworkPolicies are the namespace's policies for neuron pods: every
// connection in and out denied, then connections in from Cortex's pods
// on the agent port, and nothing else: not even the cluster's DNS. A
// neuron with network egress reaches out through the tunnel a host holds
// over that same connection (EgressListen), whose proxy resolves names
// and decides. Policies add up (any policy that allows a connection
// allows it), so these are the only ones that may select neuron pods.
func NetworkPolicies(cfg Config) []*networkingv1.NetworkPolicy {
	cfg = cfg.Defaults()
	neurons := metav1.LabelSelector{MatchLabels: map[string]string{LabelRole: "neuron"}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: map[string]string{LabelManaged: managedBy}}
	}
	tm := metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
	tcp := corev1.ProtocolTCP
	agentPort := intstr.FromInt32(cfg.AgentPort)
	deny := &networkingv1.NetworkPolicy{TypeMeta: tm, ObjectMeta: meta("neurons-deny-all"), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: neurons,
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}}
	fromHost := &networkingv1.NetworkPolicy{TypeMeta: tm, ObjectMeta: meta("neurons-from-cortex"), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: neurons,
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			// Cortex's pods, in the hosts' namespace, and never a
			// neuron's, whatever its labels.
			From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: cfg.HostNamespace}},
				PodSelector: &metav1.LabelSelector{
					MatchLabels:      map[string]string{LabelHost: hostName},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelRole, Operator: metav1.LabelSelectorOpDoesNotExist}},
				},
			}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &agentPort}},
		}},
	}}
	out := []*networkingv1.NetworkPolicy{deny, fromHost}
	return out
}
