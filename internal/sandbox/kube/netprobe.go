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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
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
// the policies are not enforced. Then the probe's pod is asked to dial
// the control (a pod the policies do not select, on the port the host
// reached it on): reaching it means their egress half is not enforced,
// and a neuron could go around its host's proxy. The verdict is kept in a ConfigMap
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
	// probeHardMaxAge is how long an old verdict stands in for a probe
	// that failed: past it, there is no verdict (and creates are refused).
	probeHardMaxAge = 48 * time.Hour
	// probeSkew is how far in the future a verdict's time may be (hosts'
	// clocks differ); further, it is no verdict.
	probeSkew = 5 * time.Minute
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
		// Enough CPU that a greeting is not late because of a limit.
		small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
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
			Resources:       corev1.ResourceRequirements{Requests: small, Limits: small},
			SecurityContext: hardened(),
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

// ErrCannotProbe: the probe could not tell whether the policies are
// enforced (this host reaches no pod, or not the control's denied port,
// or the probe's pods did not run as they should).
var ErrCannotProbe = errors.New("the network probe cannot tell")

// ControlPod is the probe's control: the same listener on the port the
// policies deny, in a pod no neuron policy selects (no LabelRole). That
// this host reaches it there shows the path to a pod on that port is
// open (no firewall, a host in the cluster), so that a denied dial to the
// probe's pod says something of the policies.
func ControlPod(cfg Config, name string) *corev1.Pod {
	pod := ProbePod(cfg, name)
	pod.Labels = map[string]string{LabelProbe: "control"}
	pod.Spec.Containers = pod.Spec.Containers[1:] // the denied port's listener
	pod.Spec.Containers[0].Name = "control"
	return pod
}

// ProbeNetwork runs the probe (see above) within ctx, records its verdict
// in ProbeConfigMap, and returns it: a verdict measured is returned even
// when recording it failed (with that error). dial reaches a pod's
// address (nil: a plain TCP dial). The probe's pods are removed whatever
// happens, and so are any an earlier probe left.
func (c *Cluster) ProbeNetwork(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error)) (NetworkVerdict, error) {
	cfg := c.Config.Defaults()
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
	}
	pods := c.Core.CoreV1().Pods(cfg.Namespace)
	// What a probe cut short left (its host gone before its cleanup).
	if old, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelProbe}); err == nil {
		for _, p := range old.Items {
			pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:])
	var made []string
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		for _, name := range made {
			pods.Delete(dctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		cancel()
	}()
	var running [2]*corev1.Pod
	for i, pod := range []*corev1.Pod{ProbePod(cfg, "nsys-cortex-netprobe-"+suffix), ControlPod(cfg, "nsys-cortex-netcontrol-"+suffix)} {
		got, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return NetworkVerdict{}, fmt.Errorf("%w: %v", ErrCannotProbe, explain(err, "create", "pods", cfg.Namespace))
		}
		made = append(made, got.Name)
		running[i] = got
	}
	for i, pod := range running {
		var err error
		if running[i], err = c.waitReady(ctx, pod); err != nil {
			return NetworkVerdict{}, fmt.Errorf("%w: its pod %s/%s: %v", ErrCannotProbe, cfg.Namespace, pod.Name, err)
		}
	}
	probe, control := running[0], running[1]
	port := func(pod *corev1.Pod, p int32) string { return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p))) }
	allowed, denied, open := port(probe, cfg.AgentPort), port(probe, cfg.AgentPort+1), port(control, cfg.AgentPort+1)
	cannot := func(what, addr string, err error) error {
		return fmt.Errorf("%w: this host cannot reach %s (%s: %v); run it from a host in the cluster "+
			"(kubectl exec deploy/nsys-cortex -- nsys-cortex doctor)", ErrCannotProbe, what, addr, err)
	}
	if _, err := probeDial(ctx, dial, allowed); err != nil {
		return NetworkVerdict{}, cannot("the probe's pod on the port the policies allow", allowed, err)
	}
	if _, err := probeDial(ctx, dial, open); err != nil {
		return NetworkVerdict{}, cannot("the control pod (no policy selects it) on the port the policies deny a neuron", open, err)
	}
	v := NetworkVerdict{Checked: time.Now().Truncate(time.Second)}
	connected, err := probeDial(ctx, dial, denied)
	if connected {
		// A connection made is a connection the policies should have
		// stopped, whatever the listener said after.
		v.Detail = fmt.Sprintf("%s answered, and so did %s, which the policies deny (the control %s answered too)", allowed, denied, open)
		return v, c.recordVerdict(ctx, v)
	}
	// Not reached: the policies, or a listener gone. Its container must
	// still be running as it was, and the allowed port answer again.
	if again, gerr := c.Core.CoreV1().Pods(cfg.Namespace).Get(ctx, probe.Name, metav1.GetOptions{}); gerr != nil || !listening(again) {
		return NetworkVerdict{}, fmt.Errorf("%w: the probe's listeners did not stay up (%v)", ErrCannotProbe, gerr)
	}
	if _, aerr := probeDial(ctx, dial, allowed); aerr != nil {
		return NetworkVerdict{}, cannot("the probe's pod on the port the policies allow, a second time", allowed, aerr)
	}
	ingress := fmt.Sprintf("%s answered, and the control %s on the same port a neuron's policies deny; %s, which they deny, did not (%v)", allowed, open, denied, err)
	// Egress: the probe's pod dials the control, which the policies deny
	// it (they let a neuron pod out nowhere).
	reached, why, err := probeEgress(ctx, dial, allowed, open)
	if err != nil {
		return NetworkVerdict{}, fmt.Errorf("%w: the probe's pod did not answer the egress check (%v): is kube.image's agent older than this host? build it again", ErrCannotProbe, err)
	}
	if reached {
		v.Detail = ingress + fmt.Sprintf("; but the probe's pod reached the control %s, which the policies deny it: egress is not enforced", open)
		return v, c.recordVerdict(ctx, v)
	}
	v.Enforced, v.Detail = true, ingress+fmt.Sprintf("; the probe's pod did not reach the control %s (%s)", open, why)
	return v, c.recordVerdict(ctx, v)
}

// probeEgress asks the probe's listener at allowed to dial target from
// its pod: reached, or not and why.
func probeEgress(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error), allowed, target string) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*probeDialTimeout)
	defer cancel()
	conn, br, _, err := greeted(ctx, dial, allowed)
	if conn != nil {
		defer conn.Close()
	}
	if err != nil {
		return false, "", fmt.Errorf("its greeting: %w", err)
	}
	if _, err := conn.Write([]byte(protocol.ProbeDial + target + "\n")); err != nil {
		return false, "", err
	}
	line, err := br.ReadString('\n')
	switch {
	case err != nil:
		return false, "", fmt.Errorf("no answer: %v", err)
	case line == protocol.ProbeReached:
		return true, "", nil
	case strings.HasPrefix(line, protocol.ProbeBlocked):
		return false, strings.TrimSpace(strings.TrimPrefix(line, protocol.ProbeBlocked)), nil
	}
	return false, "", fmt.Errorf("an answer that is none: %.80q", line)
}

// listening reports whether pod is running with every container ready
// and none restarted.
func listening(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready || cs.RestartCount != 0 {
			return false
		}
	}
	return true
}

// probeDial dials addr and reads the probe listener's greeting; connected
// says whether the connection was made, whatever came after.
func probeDial(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error), addr string) (connected bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeDialTimeout)
	defer cancel()
	conn, _, connected, err := greeted(ctx, dial, addr)
	if conn != nil {
		conn.Close()
	}
	return connected, err
}

// greeted dials the probe's listener at addr within ctx and reads its
// greeting: the connection (nil when none was made, else the caller's to
// close, its deadline ctx's) and its reader, which hold what comes after.
func greeted(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error), addr string) (net.Conn, *bufio.Reader, bool, error) {
	conn, err := dial(ctx, addr)
	if err != nil {
		return nil, nil, false, err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	br := bufio.NewReaderSize(conn, 256)
	line, err := br.ReadString('\n')
	if err == nil && line != protocol.ProbeGreeting {
		err = fmt.Errorf("not the probe's listener: %q", line)
	}
	return conn, br, true, err
}

// waitReady waits until pod is ready (its listeners are), or failed.
func (c *Cluster) waitReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := c.Core.CoreV1().Pods(pod.Namespace)
	var ready *corev1.Pod
	check := func(p *corev1.Pod) (bool, error) {
		if p.Name != pod.Name {
			return false, nil
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("ended (%s): %s", p.Status.Phase, p.Status.Message)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
				ready = p
				return true, nil
			}
		}
		return false, nil
	}
	if done, err := check(pod); done || err != nil {
		return ready, err
	}
	done, err := follow(ctx, func() (watch.Interface, error) {
		return pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
	}, nil, func(ev watch.Event) (bool, error) {
		if p, isPod := ev.Object.(*corev1.Pod); isPod {
			return check(p)
		}
		return false, nil
	})
	if done || err != nil {
		return ready, err
	}
	return nil, fmt.Errorf("not ready: %w", context.Cause(ctx))
}

// recordVerdict keeps v in ProbeConfigMap for every host.
func (c *Cluster) recordVerdict(ctx context.Context, v NetworkVerdict) error {
	cfg := c.Config.Defaults()
	cms := c.Core.CoreV1().ConfigMaps(cfg.Namespace)
	data := map[string]string{"enforced": strconv.FormatBool(v.Enforced), "checked": v.Checked.UTC().Format(time.RFC3339), "detail": v.Detail}
	// Another host's probe may write it meanwhile: the later verdict wins.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, ProbeConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ProbeConfigMap, Namespace: cfg.Namespace,
				Labels: map[string]string{LabelManaged: managedBy}}, Data: data}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), ProbeConfigMap, err)
			}
			return explainIf(err, "create", "configmaps", cfg.Namespace)
		}
		if err != nil {
			return explain(err, "get", "configmaps", cfg.Namespace)
		}
		cm.Data = data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return err
		}
		return explainIf(err, "update", "configmaps", cfg.Namespace)
	})
}

// NetworkVerdict reads the recorded verdict: ok false when there is none
// (or one that does not parse, or one dated more than a few minutes
// ahead, which count as none).
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
	if err1 != nil || err2 != nil || time.Until(checked) > probeSkew {
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

// probeRun is one probe in flight on a host: the creates that need its
// verdict wait for done, each within its own context.
type probeRun struct {
	done chan struct{}
	v    NetworkVerdict
	err  error
}

// checkNetwork refuses a create on a cluster that does not keep neurons
// off the network, unless kube.allow_open_network says to. It reads the
// recorded verdict (at most once a minute). Where there is none, or it is
// older than ProbeMaxAge, it has the probe run (one at a time on a host,
// in the background, waited for within ctx); a verdict the probe measured
// counts even when it could not be recorded. A probe that failed leaves a
// verdict younger than two days in force, and is not tried again for a
// minute. A host outside the cluster (kube.port_forward) cannot probe: it
// needs a verdict a host inside recorded.
func (m *Manager) checkNetwork(ctx context.Context) error {
	if m.Cluster.Config.OpenNetwork {
		return nil
	}
	m.probeMu.Lock()
	if !m.verdictRead.IsZero() && time.Since(m.verdictRead) <= time.Minute {
		v, err := m.verdict, m.verdictErr
		m.probeMu.Unlock()
		return verdictError(v, err)
	}
	m.probeMu.Unlock()
	v, ok, err := m.Cluster.NetworkVerdict(ctx)
	if err != nil {
		return err
	}
	if ok && time.Since(v.Checked) <= ProbeMaxAge {
		m.remember(v, nil)
		return verdictError(v, nil)
	}
	run := m.startProbe()
	select {
	case <-run.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the network probe: %w", ctx.Err())
	}
	v, err = settle(v, ok, run.v, run.err)
	m.remember(v, err)
	return verdictError(v, err)
}

// settle is the verdict a host goes by once a probe has run (probed, or
// perr): the one it measured, recorded or not; else the recorded one
// (stored, when ok), while it is younger than probeHardMaxAge; else none,
// and why.
func settle(stored NetworkVerdict, ok bool, probed NetworkVerdict, perr error) (NetworkVerdict, error) {
	switch {
	case probed != (NetworkVerdict{}):
		return probed, nil
	case ok && time.Since(stored.Checked) <= probeHardMaxAge:
		return stored, nil
	}
	return NetworkVerdict{}, perr
}

// errOutside is why a host outside the cluster cannot probe.
var errOutside = fmt.Errorf("%w from outside the cluster (kube.port_forward reaches pods past their NetworkPolicies): "+
	"run `nsys-cortex doctor` in a host pod once (kubectl exec deploy/nsys-cortex -- nsys-cortex doctor) and it records the verdict", ErrCannotProbe)

// remember keeps what checkNetwork found for a minute.
func (m *Manager) remember(v NetworkVerdict, err error) {
	m.probeMu.Lock()
	m.verdict, m.verdictErr, m.verdictRead = v, err, time.Now()
	m.probeMu.Unlock()
}

// verdictError is the refusal (or nil) that verdict v, or the error that
// left none, makes of a create.
func verdictError(v NetworkVerdict, err error) error {
	switch {
	case err != nil:
		return &sandbox.UnenforceableError{Mode: Mode, Policy: "network none", Reason: "whether the cluster's network plugin enforces NetworkPolicy is not known: " +
			err.Error() + "; or set kube.allow_open_network=true to run neurons whether or not it does (docs/kube.md)"}
	case !v.Enforced:
		return openNetwork(v)
	}
	return nil
}

// startProbe returns the probe in flight, or starts one: its own context,
// bounded, ended by Close.
func (m *Manager) startProbe() *probeRun {
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	if m.probing != nil {
		return m.probing
	}
	run := &probeRun{done: make(chan struct{})}
	m.probing = run
	if m.Forward != nil {
		run.err = errOutside
		m.probing = nil
		close(run.done)
		return run
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	m.stopProbe = cancel
	go func() {
		defer cancel()
		v, err := m.Cluster.ProbeNetwork(ctx, nil)
		m.probeMu.Lock()
		run.v, run.err = v, err // a verdict with an error: measured, not recorded
		m.probing = nil
		m.probeMu.Unlock()
		close(run.done)
	}()
	return run
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
	if !ok && s.Config.OpenNetwork {
		it.OK, it.Detail = true, "not probed: kube.allow_open_network runs neurons whether or not it is"
		return it
	}
	if !ok || time.Since(v.Checked) > ProbeMaxAge {
		probed, perr := NetworkVerdict{}, errOutside
		if !s.PortForward {
			// Its own time: a pod to start, on a cluster.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			probed, perr = cl.ProbeNetwork(pctx, nil)
			cancel()
		}
		v, err = settle(v, ok, probed, perr)
	}
	if err != nil {
		it.OK, it.Detail = s.Config.OpenNetwork, "not known: "+err.Error()
	} else {
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
