package kube

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// kubelet simulates the cluster's nodes (and agent-sandbox's controller)
// on the fake clientset: a pod made is given a uid, a node and an IP, and
// the real agent runs for it as a local process listening on a port of
// its own, checking pod tokens against the trust key; its home is a
// directory kept per claim, as a volume is; a deleted pod's agent ends.
// A pod of a neuron named in fail never starts (its image cannot be
// pulled).
type kubelet struct {
	t    *testing.T
	core *fake.Clientset
	ag   *agentsfake.Clientset // nil: the fallback path
	pub  ed25519.PublicKey
	fail map[string]bool

	mu    sync.Mutex
	addrs map[string]string
	stops map[string]func()
	homes map[string]string
	n     int
}

func startKubelet(t *testing.T, core *fake.Clientset, ag *agentsfake.Clientset, pub ed25519.PublicKey, fail ...string) *kubelet {
	k := &kubelet{t: t, core: core, ag: ag, pub: pub, fail: map[string]bool{}, addrs: map[string]string{}, stops: map[string]func(){}, homes: map[string]string{}}
	for _, id := range fail {
		k.fail[id] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, stop := range k.stops {
			stop()
		}
	})
	pw, err := core.CoreV1().Pods("nsys-cortex").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer pw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-pw.ResultChan():
				pod, ok := ev.Object.(*corev1.Pod)
				switch {
				case !ok:
				case ev.Type == watch.Added:
					k.run(pod)
				case ev.Type == watch.Deleted:
					k.stop(pod.Name)
				}
			}
		}
	}()
	if ag != nil {
		sw, err := ag.AgentsV1beta1().Sandboxes("nsys-cortex").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sw.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-sw.ResultChan():
					if sb, ok := ev.Object.(*sbv1.Sandbox); ok {
						k.reconcile(ctx, sb, ev.Type)
					}
				}
			}
		}()
	}
	return k
}

// reconcile is agent-sandbox's controller, as far as a neuron needs it:
// a running Sandbox has its pod; a suspended or deleted one has none.
func (k *kubelet) reconcile(ctx context.Context, sb *sbv1.Sandbox, et watch.EventType) {
	pods := k.core.CoreV1().Pods(sb.Namespace)
	if et == watch.Deleted || sb.Spec.OperatingMode == sbv1.SandboxOperatingModeSuspended {
		pods.Delete(ctx, sb.Name, metav1.DeleteOptions{})
		return
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: sb.Namespace, Labels: sb.Spec.PodTemplate.ObjectMeta.Labels},
		Spec: sb.Spec.PodTemplate.Spec}
	pods.Create(ctx, pod, metav1.CreateOptions{}) // an existing pod stays
}

func (k *kubelet) run(pod *corev1.Pod) {
	k.mu.Lock()
	k.n++
	uid := types.UID("uid-" + pod.Name + "-" + string(rune('a'+k.n)))
	claim := pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	home := k.homes[claim]
	if home == "" {
		home = k.t.TempDir()
		k.homes[claim] = home
	}
	k.mu.Unlock()
	id := pod.Labels[LabelID]
	pod = pod.DeepCopy()
	pod.UID, pod.Spec.NodeName = uid, "node-1"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	if k.fail[id] {
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: AgentContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "pull access denied"}}}}
		k.core.CoreV1().Pods(pod.Namespace).Update(context.Background(), pod, metav1.UpdateOptions{})
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		k.t.Error(err)
		return
	}
	addr := ln.Addr().String()
	ln.Close()
	self := podtoken.Identity{Namespace: pod.Namespace, Pod: pod.Name, UID: string(uid)}
	a, err := agent.New(agent.Config{ID: id, Root: home, Listen: addr, Version: "test", Logger: log.New(io.Discard, "", 0),
		TokenCheck: func(tok string) error { _, err := podtoken.Verify(k.pub, tok, self, time.Now()); return err }})
	if err != nil {
		k.t.Error(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	k.mu.Lock()
	k.addrs[pod.Name] = addr
	k.stops[pod.Name] = func() { cancel(); <-done }
	k.mu.Unlock()
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "127.0.0.1"
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	if _, err := k.core.CoreV1().Pods(pod.Namespace).Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		k.t.Error(err)
	}
}

func (k *kubelet) stop(name string) {
	k.mu.Lock()
	stop := k.stops[name]
	delete(k.stops, name)
	delete(k.addrs, name)
	k.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (k *kubelet) address(pod *corev1.Pod) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a := k.addrs[pod.Name]; a != "" {
		return a, nil
	}
	return "", os.ErrNotExist
}

func exec(t *testing.T, c *link.Client, script string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: script}})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout)
}

// A kube neuron through the Manager, on each path: created (its agent
// reached with a pod token), commands run, stopped with its home kept,
// created again on it, driven by a second host that shares nothing with
// the first but the cluster, and wiped. A create the cluster cannot run
// fails naming why, and leaves nothing.
func TestManager(t *testing.T) {
	for _, path := range []string{"sandbox", "pods"} {
		t.Run(path, func(t *testing.T) {
			core := fake.NewClientset()
			var ag *agentsfake.Clientset
			cl := &Cluster{Core: core, Config: testConfig}
			if path == "sandbox" {
				ag = agentsfake.NewSimpleClientset()
				cl.Agents = ag
			}
			priv, _ := podtoken.NewKey()
			k := startKubelet(t, core, ag, priv.Public().(ed25519.PublicKey), "bad")
			m := &Manager{Cluster: cl, Key: priv, Address: k.address}
			t.Cleanup(func() { m.Close() })
			ctx := context.Background()
			st, err := m.Create(ctx, "a", sandbox.CreateOptions{Labels: map[string]string{"team": "a"}, Env: []string{"FOO=bar"}, BootTimeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if st.Status != sandbox.StatusRunning || st.Labels["team"] != "a" || st.Mode != Mode {
				t.Fatalf("created: %+v", st)
			}
			c, err := m.Connect(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if out := exec(t, c, "echo kept > home-file; echo ran"); out != "ran\n" {
				t.Fatalf("exec: %q", out)
			}
			// The environment is the container's (the simulated kubelet runs
			// the agent in this process, so it is read off the pod).
			if pod, err := core.CoreV1().Pods("nsys-cortex").Get(ctx, "n-a", metav1.GetOptions{}); err != nil || len(pod.Spec.Containers[0].Env) != 1 || pod.Spec.Containers[0].Env[0].Value != "bar" {
				t.Errorf("the pod's environment: %v", err)
			}
			if err := m.Destroy(ctx, "a", sandbox.DestroyOptions{}); err != nil {
				t.Fatal(err)
			}
			if st, err := m.Get(ctx, "a"); err != nil || st.Status != sandbox.StatusStopped && path == "sandbox" {
				t.Errorf("stopped: %+v %v", st, err)
			}
			if _, err := m.Create(ctx, "a", sandbox.CreateOptions{BootTimeout: 20 * time.Second}); err != nil {
				t.Fatal(err)
			}
			// Another host: nothing in common with the first but the cluster.
			m2 := &Manager{Cluster: &Cluster{Core: core, Agents: cl.Agents, Config: testConfig}, Key: priv, Address: k.address}
			t.Cleanup(func() { m2.Close() })
			c2, err := m2.Connect(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if out := exec(t, c2, "cat home-file"); out != "kept\n" {
				t.Fatalf("the home after a stop and a create, from another host: %q", out)
			}
			if list, err := m2.List(ctx); err != nil || len(list) != 1 || list[0].ID != "a" {
				t.Errorf("another host's list: %+v %v", list, err)
			}
			if err := m2.Destroy(ctx, "a", sandbox.DestroyOptions{Wipe: true}); err != nil {
				t.Fatal(err)
			}
			var nf *sandbox.NotFoundError
			if _, err := m.Get(ctx, "a"); !errors.As(err, &nf) {
				t.Errorf("a wiped neuron: %v", err)
			}

			_, err = m.Create(ctx, "bad", sandbox.CreateOptions{BootTimeout: 20 * time.Second})
			if err == nil || !strings.Contains(err.Error(), "ImagePullBackOff") {
				t.Fatalf("a pod whose image cannot be pulled: %v", err)
			}
			if pods, _ := core.CoreV1().Pods("nsys-cortex").List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
				t.Errorf("a failed create left pod %s", pods.Items[0].Name)
			}
			if claims, _ := core.CoreV1().PersistentVolumeClaims("nsys-cortex").List(ctx, metav1.ListOptions{}); len(claims.Items) != 0 {
				t.Errorf("a failed create left claim %s", claims.Items[0].Name)
			}
			_, err = m.Create(ctx, "open", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}})
			var unenforceable *sandbox.UnenforceableError
			if !errors.As(err, &unenforceable) {
				t.Errorf("a neuron with the host's network: %v", err)
			}
			if _, err := m.Create(ctx, "Upper_Case", sandbox.CreateOptions{}); !errdefs.Of(err).Is(errdefs.Invalid) {
				t.Errorf("an id that is no DNS label: %v", err)
			}
		})
	}
}
