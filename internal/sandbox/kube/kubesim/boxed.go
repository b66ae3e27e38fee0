package kubesim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// boxes runs pods' agents inside neurons of another mode (InSandboxes).
type boxes struct {
	m        sandbox.Manager
	agentBin []byte
	// mu makes one pod at a time start or stop on a claim's neuron.
	mu sync.Map // claim -> *sync.Mutex
}

// InSandboxes makes the Kubelet run each neuron pod's agent as the real
// cortex-agent (the program at agentBin) in a process of its own, inside
// a neuron of m (nsbox: the test's agents behind a boundary, as a
// container's are), instead of in this process. The neuron has the
// host's network, as a pod has its node's here: its pod IP is a loopback
// address of the host's. Its home is the pod's (/home/agent, kept per
// claim, as a volume is: the claim's neuron is stopped with its pod and
// wiped with its claim); its /tmp is the pod's emptyDir. Call it before
// any pod starts.
func (k *Kubelet) InSandboxes(m sandbox.Manager, agentBin string) error {
	b, err := os.ReadFile(agentBin)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.box = &boxes{m: m, agentBin: b}
	k.mu.Unlock()
	return nil
}

// boxDir is where a boxed pod's agent, its trust key and its downward-API
// files go inside the neuron: the pod's /tmp, new at each start.
const boxDir = "/tmp/.kubesim"

// boxCA is where a boxed pod's egress authority goes (the pod's
// boot.EgressCADir: the neuron's /run is not its own to write).
const boxCA = "/tmp"

// boxID is the neuron that holds claim's home: named by a digest of the
// claim's name, which may be longer than an id.
func boxID(claim string) (string, error) {
	sum := sha256.Sum256([]byte(claim))
	id := "pod-" + hex.EncodeToString(sum[:10])
	if err := ids.Validate(id); err != nil {
		return "", fmt.Errorf("the neuron for claim %s: %w", claim, err)
	}
	return id, nil
}

// runBoxed starts pod's agent inside the neuron of its claim, on addr,
// and says whether it listens (false: the pod is Failed already, the
// agent having ended); when the agent ends by itself later, the pod is
// Failed with its exit code.
func (k *Kubelet) runBoxed(ctx context.Context, pod *corev1.Pod, claim, ip, addr, trustPEM string) (bool, error) {
	b := k.box
	nid, err := boxID(claim)
	if err != nil {
		return false, err
	}
	lock, _ := b.mu.LoadOrStore(claim, &sync.Mutex{})
	lock.(*sync.Mutex).Lock()
	defer lock.(*sync.Mutex).Unlock()
	if _, err := b.m.Create(ctx, nid, sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}}); err != nil {
		return false, fmt.Errorf("the pod's sandbox: %w", err)
	}
	listens := false
	defer func() {
		if !listens { // the pod did not start: its processes go, its home stays
			b.m.Destroy(context.WithoutCancel(ctx), nid, sandbox.DestroyOptions{})
		}
	}()
	c, err := b.m.Connect(ctx, nid)
	if err != nil {
		return false, err
	}
	files := map[string][]byte{
		"cortex-agent":  b.agentBin,
		"trust.pub":     []byte(trustPEM),
		"pod/namespace": []byte(pod.Namespace),
		"pod/name":      []byte(pod.Name),
		"pod/uid":       []byte(pod.UID),
	}
	for name, data := range files {
		mode := os.FileMode(0o644)
		if name == "cortex-agent" {
			mode = 0o755
		}
		if err := c.WriteFile(ctx, boxDir+"/"+name, data, &link.WriteOptions{Mode: mode, Parents: true}); err != nil {
			return false, fmt.Errorf("the pod's files: %w", err)
		}
	}
	ct := pod.Spec.Containers[0]
	argv := []string{boxDir + "/cortex-agent", "--listen=" + addr, "--trust-key=" + boxDir + "/trust.pub", "--pod-info=" + boxDir + "/pod"}
	for _, a := range ct.Args {
		switch {
		case strings.HasPrefix(a, "--id="), strings.HasPrefix(a, "--trust-key-sha256="), strings.HasPrefix(a, "--workdir="):
			argv = append(argv, a)
		case strings.HasPrefix(a, "--egress="):
			argv = append(argv, loopbackOf(a, ip))
		case a == "--egress-ca="+boot.EgressCADir:
			argv = append(argv, "--egress-ca="+boxCA)
		}
	}
	env := containerEnv(ct, ip, "", boxCA) // its home is the pod's own
	info, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: argv, Env: env, Cwd: ct.WorkingDir}})
	if err != nil {
		return false, fmt.Errorf("starting the pod's agent: %w", err)
	}
	// What a kubelet's container ending tells: the exit code, and (the
	// pod's FallbackToLogsOnError) the log's last lines.
	ended := make(chan exit, 1)
	go func() {
		var tail []byte
		end, err := c.ProcAttach(context.WithoutCancel(ctx), &protocol.ProcAttachArgs{PID: info.PID, Follow: true}, func(_ string, _ int64, p []byte) error {
			tail = append(tail, p...)
			if len(tail) > 4096 {
				tail = tail[len(tail)-4096:]
			}
			return nil
		})
		if err != nil {
			ended <- exit{code: 137, message: "its sandbox ended: " + err.Error()}
			return
		}
		ended <- exit{code: end.ExitCode, message: strings.TrimSpace(end.Signal + " " + string(tail))}
	}()
	// The readiness probe: the agent port answers. An agent that ends
	// first (it refused its trust key) fails its pod, as a container
	// that exits does.
	if err := readyOrEnded(ctx, addr, ended); err != nil {
		b.m.Destroy(context.WithoutCancel(ctx), nid, sandbox.DestroyOptions{}) // the attach ends, and says how
		select {
		case end := <-ended:
			return false, k.terminated(ctx, pod.Namespace, pod.Name, int32(end.code), end.message)
		default:
			return false, err
		}
	}
	listens = true
	stopped := make(chan struct{})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(stopped)
			lock.(*sync.Mutex).Lock()
			defer lock.(*sync.Mutex).Unlock()
			// The pod goes: its processes with it, its home kept.
			b.m.Destroy(context.Background(), nid, sandbox.DestroyOptions{})
			<-ended
		})
	}
	k.mu.Lock()
	k.stops[pod.Name] = stop
	k.mu.Unlock()
	go func() {
		select {
		case <-stopped:
		case end := <-ended:
			ended <- end // for stop, should it come
			if k.ctx.Err() != nil {
				return
			}
			k.terminated(k.ctx, pod.Namespace, pod.Name, int32(end.code), end.message)
		}
	}()
	return true, nil
}

// exit is how a boxed pod's agent ended.
type exit struct {
	code    int
	message string
}

// readyOrEnded waits until addr takes a connection, or the agent ends
// (ended's value is put back), for at most 30 s.
func readyOrEnded(ctx context.Context, addr string, ended chan exit) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case end := <-ended:
			ended <- end
			return fmt.Errorf("the pod's agent ended (exit %d): %s", end.code, end.message)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // the probe's period
		}
		if time.Now().After(deadline) {
			return errors.New("the pod's agent did not listen within 30 s")
		}
	}
}

// wipeBox wipes the neuron of claim, its home gone with its claim.
func (k *Kubelet) wipeBox(claim string) {
	nid, err := boxID(claim)
	if err != nil {
		return
	}
	k.box.m.Destroy(context.Background(), nid, sandbox.DestroyOptions{Wipe: true})
}
