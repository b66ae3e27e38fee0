package kube

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The network probe. A neuron pod is kept off the network by the
// namespace's NetworkPolicies (NetworkPolicies), and only a network plugin
// that enforces them does that: one that ignores them takes them all the
// same, and the API cannot tell the two apart. So a host tries: it makes
// a pod the policies select, listening on two ports (the agent's, which
// the policies let Cortex's pods reach, and the next one, which they do
// not), and dials both. The first must answer (else this host cannot
// reach pods at all, and nothing is learnt); the second answering means
// the policies are not enforced. The verdict is kept in a ConfigMap
// (ProbeConfigMap) every host reads, and a create refuses to start a
// neuron that would reach the network (UNENFORCEABLE) unless
// kube.allow_open_network says to.

const (
	// ProbeConfigMap keeps the last verdict (keys enforced, checked, detail).
	ProbeConfigMap = "nsys-cortex-network"
	// LabelProbe marks the probe's pod (never a neuron's: it has no id).
	LabelProbe = "neuron.nsys-cortex/probe"
	// ProbeMaxAge is how long a verdict holds before a create probes again.
	ProbeMaxAge = 24 * time.Hour
	// probeDialTimeout bounds each dial: a plugin that enforces usually
	// drops the connection, and the dial runs out.
	probeDialTimeout = 3 * time.Second
)

// NetworkVerdict is what a probe found.
type NetworkVerdict struct {
	// Enforced: the port the policies deny did not answer, and the one
	// they allow did.
	Enforced bool
	Checked  time.Time
	// Detail says what each dial did.
	Detail string
}

// String is the verdict as doctor and the refusal say it.
func (v NetworkVerdict) String() string {
	what := "NetworkPolicy is enforced"
	if !v.Enforced {
		what = "NetworkPolicy is NOT enforced (the cluster's network plugin ignores it): a neuron pod would reach the network"
	}
	return fmt.Sprintf("%s (probed %s: %s)", what, v.Checked.UTC().Format(time.RFC3339), v.Detail)
}

// ProbePod is the probe's pod: the neuron image's agent listening on the
// agent port and on the next one, hardened as a neuron's pod is, selected
// by the neurons' NetworkPolicies (LabelRole) and by nothing that lists
// neurons.
func ProbePod(cfg Config, name string) *corev1.Pod {
	cfg = cfg.Defaults()
	listener := func(cname string, port int32) corev1.Container {
		small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
		return corev1.Container{
			Name:            cname,
			Image:           cfg.Image,
			ImagePullPolicy: cfg.ImagePullPolicy,
			Command:         []string{AgentPath},
			Args:            []string{"probe-listen", ":" + strconv.Itoa(int(port))},
			Ports:           []corev1.ContainerPort{{ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			// The kubelet's probe comes from the node, which the policies
			// do not govern: ready means listening.
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}},
				PeriodSeconds: 1,
			},
			Resources: corev1.ResourceRequirements{Requests: small, Limits: small},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				RunAsNonRoot:             ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		}
	}
	spec := corev1.PodSpec{
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		ActiveDeadlineSeconds:         ptr.To[int64](600), // a probe cut short does not stay
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](NeuronUID),
			RunAsGroup:     ptr.To[int64](NeuronGID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{listener("allowed", cfg.AgentPort), listener("denied", cfg.AgentPort+1)},
	}
	if cfg.RuntimeClass != "" {
		spec.RuntimeClassName = ptr.To(cfg.RuntimeClass)
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: map[string]string{LabelRole: "neuron", LabelProbe: "network"}},
		Spec:       spec,
	}
}

// ErrCannotProbe: this host could not reach the probe's pod on the port
// the policies allow, so the probe says nothing (a host outside the
// cluster, or a probe pod that never started).
var ErrCannotProbe = errors.New("the network probe cannot tell")

// ProbeNetwork runs the probe (see above) within ctx, records its verdict
// in ProbeConfigMap, and returns it. dial reaches a pod's address (nil:
// a plain TCP dial). The probe's pod is removed whatever happens.
func (c *Cluster) ProbeNetwork(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error)) (NetworkVerdict, error) {
	cfg := c.Config.Defaults()
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
	}
	pods := c.Core.CoreV1().Pods(cfg.Namespace)
	var rnd [4]byte
	rand.Read(rnd[:])
	name := "nsys-cortex-netprobe-" + hex.EncodeToString(rnd[:])
	pod, err := pods.Create(ctx, ProbePod(cfg, name), metav1.CreateOptions{})
	if err != nil {
		return NetworkVerdict{}, explain(err, "create", "pods", cfg.Namespace)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		pods.Delete(dctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		cancel()
	}()
	if pod, err = c.waitReady(ctx, pod); err != nil {
		return NetworkVerdict{}, fmt.Errorf("%w: its pod %s/%s: %v", ErrCannotProbe, cfg.Namespace, name, err)
	}
	allowed := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(cfg.AgentPort)))
	denied := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(cfg.AgentPort+1)))
	if err := probeDial(ctx, dial, allowed); err != nil {
		return NetworkVerdict{}, fmt.Errorf("%w: this host cannot reach the probe's pod on the port the policies allow (%s: %v); "+
			"run it from a host in the cluster (kubectl exec deploy/nsys-cortex -- nsys-cortex doctor)", ErrCannotProbe, allowed, err)
	}
	v := NetworkVerdict{Checked: time.Now().Truncate(time.Second)}
	if err := probeDial(ctx, dial, denied); err != nil {
		v.Enforced, v.Detail = true, fmt.Sprintf("%s answered; %s, which the policies deny, did not (%v)", allowed, denied, err)
	} else {
		v.Detail = fmt.Sprintf("%s answered, and so did %s, which the policies deny", allowed, denied)
	}
	return v, c.recordVerdict(ctx, v)
}

// probeDial dials addr and reads the probe listener's greeting.
func probeDial(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error), addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeDialTimeout)
	defer cancel()
	conn, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	line, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
	if err != nil {
		return err
	}
	if line != protocol.ProbeGreeting {
		return fmt.Errorf("not the probe's listener: %q", line)
	}
	return nil
}

// waitReady waits until pod is ready (its listeners are), or failed.
func (c *Cluster) waitReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := c.Core.CoreV1().Pods(pod.Namespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: pod.ResourceVersion})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return nil, fmt.Errorf("ended (%s): %s", pod.Status.Phase, pod.Status.Message)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
				return pod, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not ready: %w", ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, errors.New("its watch ended")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && p.Name == pod.Name {
				pod = p
			}
		}
	}
}

// recordVerdict keeps v in ProbeConfigMap for every host.
func (c *Cluster) recordVerdict(ctx context.Context, v NetworkVerdict) error {
	cfg := c.Config.Defaults()
	cms := c.Core.CoreV1().ConfigMaps(cfg.Namespace)
	data := map[string]string{"enforced": strconv.FormatBool(v.Enforced), "checked": v.Checked.UTC().Format(time.RFC3339), "detail": v.Detail}
	cm, err := cms.Get(ctx, ProbeConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ProbeConfigMap, Namespace: cfg.Namespace,
			Labels: map[string]string{LabelManaged: managedBy}}, Data: data}, metav1.CreateOptions{})
		return explainIf(err, "create", "configmaps", cfg.Namespace)
	}
	if err != nil {
		return explain(err, "get", "configmaps", cfg.Namespace)
	}
	cm.Data = data
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return explainIf(err, "update", "configmaps", cfg.Namespace)
}

// NetworkVerdict reads the recorded verdict: ok false when there is none
// (or one that does not parse, which counts as none).
func (c *Cluster) NetworkVerdict(ctx context.Context) (v NetworkVerdict, ok bool, err error) {
	cfg := c.Config.Defaults()
	cm, err := c.Core.CoreV1().ConfigMaps(cfg.Namespace).Get(ctx, ProbeConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return v, false, nil
	}
	if err != nil {
		return v, false, explain(err, "get", "configmaps", cfg.Namespace)
	}
	enforced, err1 := strconv.ParseBool(cm.Data["enforced"])
	checked, err2 := time.Parse(time.RFC3339, cm.Data["checked"])
	if err1 != nil || err2 != nil {
		return v, false, nil
	}
	return NetworkVerdict{Enforced: enforced, Checked: checked, Detail: cm.Data["detail"]}, true, nil
}

// openNetwork is why a create is refused on a cluster that does not keep
// neurons off the network.
func openNetwork(v NetworkVerdict) error {
	return &sandbox.UnenforceableError{Mode: Mode, Policy: "network none", Reason: v.String() +
		"; use a network plugin that enforces NetworkPolicy (Calico, Cilium), or set kube.allow_open_network=true to run neurons that reach the network anyway"}
}

// checkNetwork refuses a create on a cluster that does not keep neurons
// off the network, unless kube.allow_open_network says to. It reads the
// recorded verdict (at most once a minute); where there is none, or it is
// older than ProbeMaxAge, it runs the probe, one at a time. A host outside
// the cluster (kube.port_forward) cannot probe: it needs a verdict a host
// inside recorded.
func (m *Manager) checkNetwork(ctx context.Context) error {
	if m.Cluster.Config.OpenNetwork {
		return nil
	}
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	if m.verdictRead.IsZero() || time.Since(m.verdictRead) > time.Minute {
		v, ok, err := m.Cluster.NetworkVerdict(ctx)
		if err != nil {
			return err
		}
		if !ok || time.Since(v.Checked) > ProbeMaxAge {
			probed, err := m.probe(ctx)
			switch {
			case err == nil:
				v = probed
			case !ok: // nothing to go on
				return &sandbox.UnenforceableError{Mode: Mode, Policy: "network none", Reason: "whether the cluster's network plugin enforces NetworkPolicy is not known: " +
					err.Error() + "; or set kube.allow_open_network=true to run neurons whether or not it does (docs/kube.md)"}
			}
			// A probe that failed leaves the last verdict in force.
		}
		m.verdict, m.verdictRead = v, time.Now()
	}
	if !m.verdict.Enforced {
		return openNetwork(m.verdict)
	}
	return nil
}

// probe runs the network probe from this host, within the boot timeout.
func (m *Manager) probe(ctx context.Context) (NetworkVerdict, error) {
	if m.Forward != nil {
		return NetworkVerdict{}, fmt.Errorf("%w from outside the cluster (kube.port_forward reaches pods past their NetworkPolicies): "+
			"run `nsys-cortex doctor` in a host pod once (kubectl exec deploy/nsys-cortex -- nsys-cortex doctor) and it records the verdict", ErrCannotProbe)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return m.Cluster.ProbeNetwork(ctx, nil)
}

// networkItem is doctor's line on the network probe: the recorded verdict,
// or, where there is none (or an old one) and this host is in the
// cluster, a probe run now, which records it. Not OK when creates are
// refused because of it.
func networkItem(ctx context.Context, cl *Cluster, s Settings) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "NetworkPolicy enforced (the network probe)"}
	v, ok, err := cl.NetworkVerdict(ctx)
	if err != nil {
		it.Detail = err.Error()
		return it
	}
	if (!ok || time.Since(v.Checked) > ProbeMaxAge) && !s.PortForward {
		// Its own time: a pod to start, on a cluster.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		probed, perr := cl.ProbeNetwork(pctx, nil)
		cancel()
		if perr == nil {
			v, ok = probed, true
		} else if !ok {
			err = perr
		}
	}
	switch {
	case !ok && err == nil:
		err = fmt.Errorf("%w from outside the cluster (kube.port_forward): run doctor in a host pod once (kubectl exec deploy/nsys-cortex -- nsys-cortex doctor)", ErrCannotProbe)
		fallthrough
	case !ok:
		it.OK, it.Detail = s.Config.OpenNetwork, "not known: "+err.Error()
	default:
		it.OK, it.Detail = v.Enforced || s.Config.OpenNetwork, v.String()
	}
	switch {
	case it.OK && !v.Enforced:
		it.Detail += "; kube.allow_open_network is set: neurons run open"
	case !it.OK:
		it.Detail += "; creates are refused (UNENFORCEABLE) until a probe finds it enforced, or kube.allow_open_network=true"
	}
	return it
}
