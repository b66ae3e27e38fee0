// Command devcluster runs a Kubernetes control plane for kube mode on a
// laptop: etcd and a real kube-apiserver in this process, agent-sandbox's
// CRDs and controller, and kubesim's simulated kubelet, whose pods run
// the real Cortex agent, each in an nsbox neuron of its own (a namespace
// sandbox, where this machine runs nsbox; --in-process, or where it does
// not, in this process), on loopback addresses. It writes a kubeconfig
// to --kubeconfig once the cluster is ready and runs until it is
// interrupted, then removes everything it made.
//
//	cd test/kube && go run ./devcluster --kubeconfig /tmp/cortex-dev.kubeconfig
//	KUBECONFIG=/tmp/cortex-dev.kubeconfig NSYS_CORTEX_KUBE_IMAGE=dev NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true nsys-cortex create --mode kube n1
//
// A pod here is no pod: its neuron shares this machine's network, and
// in process its commands run as the user who runs devcluster. It is for
// trying kube mode's API, not for running code you do not trust
// (docs/kube.md, "Trying it").
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

func main() {
	// A flag set of its own: controller-runtime defines a global
	// --kubeconfig, which is another thing.
	flags := flag.NewFlagSet("devcluster", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "where to write the cluster's kubeconfig once it is ready (required)")
	namespace := flags.String("namespace", "nsys-cortex", "the namespace made for neurons (kube.namespace)")
	pods := flags.Bool("pods", false, "leave agent-sandbox's CRDs out, so that kube mode makes plain pods and claims")
	verbose := flags.Bool("verbose", false, "log what the API server and etcd log")
	inProcess := flags.Bool("in-process", false, "run the pods' agents in this process, not each in an nsbox neuron")
	flags.Parse(os.Args[1:])
	if *kubeconfig == "" || flags.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: devcluster --kubeconfig FILE [--namespace NS] [--pods] [--in-process] [--verbose]")
		os.Exit(2)
	}
	path, err := filepath.Abs(*kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	if !*verbose {
		klog.LogToStderr(false)
		klog.SetOutput(io.Discard)
	}
	r := newRunner()
	defer r.end()
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		log.Print("devcluster: stopping")
		r.end()
		os.Exit(0)
	}()

	rc := cluster.Start(r, cluster.Options{Sandboxes: !*pods, Quiet: !*verbose})
	core := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{Namespace: *namespace}.Defaults()
	cluster.Prepare(r, core, cfg)
	var box sandbox.Manager
	var agentBin string
	if !*inProcess {
		box, agentBin = boxes(r) // before the kubelet: its cleanup after the kubelet's
	}
	var kl *kubesim.Kubelet
	if *pods {
		kl = kubesim.Start(r, core, nil, cfg)
	} else {
		// agent-sandbox's own controller makes the Sandboxes' pods and
		// claims; kubesim runs the pods.
		cluster.StartController(r, rc)
		kl = kubesim.StartBeside(r, core, cluster.Agents(rc), cfg)
	}
	where := "in this process: their commands run as you, on this machine"
	if box != nil {
		if err := kl.InSandboxes(box, agentBin); err != nil {
			r.Fatal(err)
		}
		where = "each in an nsbox neuron of its own (a namespace sandbox) on this machine"
	}
	// A kubelet's port-forward, for --kube-port-forward.
	cluster.ServePortForward(r, core)
	// Written whole, then renamed: whoever waits for the file reads a
	// complete one.
	tmp := path + ".tmp"
	if err := cluster.WriteKubeconfig(rc, tmp); err != nil {
		r.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { os.Remove(path) })
	objects := "agent-sandbox Sandboxes"
	if *pods {
		objects = "plain pods and claims (no agent-sandbox CRDs)"
	}
	fmt.Printf(`devcluster: ready; %s in namespace %s.
The pods' agents run %s.
Its pods share this machine's network, as on a cluster whose network plugin
ignores NetworkPolicy: kube mode's network probe finds that, and creates are
refused unless kube.allow_open_network says to run neurons open anyway.
Try:
  export KUBECONFIG=%s NSYS_CORTEX_KUBE_IMAGE=devcluster NSYS_CORTEX_KUBE_NAMESPACE=%s
  export NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true
  nsys-cortex create --mode kube n1 && nsys-cortex exec n1 -- uname -a
As from outside a real cluster (the channel through the API server):
  nsys-cortex --kube-port-forward exec n1 -- uname -a
Interrupt to stop (everything it made goes with it).
`, objects, cfg.Namespace, where, path, cfg.Namespace)
	select {}
}

// boxes is an nsbox manager for the pods' agents, and the agent they
// run (built here, static), or nil where nsbox cannot run on this
// machine (it says why).
func boxes(r *runner) (sandbox.Manager, string) {
	bin := filepath.Join(r.dir, "cortex-agent")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/nsys-cortex/cortex/cmd/cortex-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		r.Fatalf("building cortex-agent for the pods: %v\n%s", err, out)
	}
	m, why := cluster.Sandboxes(r, r.dir, bin)
	if m == nil {
		log.Printf("devcluster: the pods' agents run in this process: %s", why)
		return nil, ""
	}
	return m, bin
}

// runner stands in for a test's testing.T for the control plane and the
// kubelet: it logs, keeps a temporary directory, and runs the cleanups,
// newest first, once, at the end or on a fatal error.
type runner struct {
	dir  string
	mu   sync.Mutex
	fns  []func()
	once sync.Once
}

func newRunner() *runner {
	dir, err := os.MkdirTemp("", "cortex-devcluster-")
	if err != nil {
		log.Fatal(err)
	}
	return &runner{dir: dir}
}

// end runs the cleanups and removes the temporary directory.
func (r *runner) end() {
	r.once.Do(func() {
		r.mu.Lock()
		fns := r.fns
		r.fns = nil
		r.mu.Unlock()
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
		os.RemoveAll(r.dir)
	})
}

func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fns = append(r.fns, f)
}

func (r *runner) TempDir() string {
	d, err := os.MkdirTemp(r.dir, "")
	if err != nil {
		r.Fatal(err)
	}
	return d
}

func (r *runner) Fatal(args ...any) { r.Error(args...); r.FailNow() }
func (r *runner) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.FailNow()
}
func (r *runner) FailNow()                          { r.end(); os.Exit(1) }
func (r *runner) Fail()                             {}
func (r *runner) Failed() bool                      { return false }
func (r *runner) Error(args ...any)                 { log.Print(append([]any{"devcluster: "}, args...)...) }
func (r *runner) Errorf(format string, args ...any) { log.Printf("devcluster: "+format, args...) }
func (r *runner) Log(args ...any)                   {}
func (r *runner) Logf(format string, args ...any)   {}
func (r *runner) Skip(args ...any)                  { r.Fatal(args...) }
func (r *runner) Skipf(format string, args ...any)  { r.Fatalf(format, args...) }
func (r *runner) SkipNow()                          { r.FailNow() }
func (r *runner) Skipped() bool                     { return false }
func (r *runner) Helper()                           {}
func (r *runner) Name() string                      { return "devcluster" }
func (r *runner) Attr(key, value string)            {}
func (r *runner) Chdir(dir string)                  { r.Fatal("devcluster: Chdir is not supported") }
func (r *runner) Setenv(key, value string)          { os.Setenv(key, value) }
