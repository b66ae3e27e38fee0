package kube

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// cutWatches makes the fake API server's first n watches of pods end at
// once, as the API server's own timeout or a host's client timeout
// (30 s) ends a watch; each watch after them is real, and opened gets a
// value when the first of those is asked for.
func cutWatches(core *fake.Clientset, n int32) (opened chan struct{}) {
	opened = make(chan struct{}, 1)
	var calls atomic.Int32
	core.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if calls.Add(1) <= n {
			w := watch.NewFake()
			w.Stop()
			return true, w, nil
		}
		select {
		case opened <- struct{}{}:
		default:
		}
		return false, nil, nil
	})
	return opened
}

func addPod(t *testing.T, core *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	pod, err := core.CoreV1().Pods("nsys-cortex").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nsys-cortex"},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// A wait for a pod's deletion outlasts the watches that end under it: a
// destroy whose pod takes longer to go than a watch lasts still ends
// when the pod does, not with "the watch ended".
func TestAwaitGoneAcrossWatches(t *testing.T) {
	core := fake.NewClientset()
	m := &Manager{Cluster: &Cluster{Core: core, Config: testConfig}}
	addPod(t, core, "n-a")
	opened := cutWatches(core, 3)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.awaitGone(wctx, "a", "n-a") }()
	select {
	case <-opened:
	case err := <-done:
		t.Fatalf("the wait ended with its watch: %v", err)
	}
	if err := core.CoreV1().Pods("nsys-cortex").Delete(ctx, "n-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the pod went and the wait says: %v", err)
	}
	// Still there when the time is up: a timeout naming the pod.
	addPod(t, core, "n-b")
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if err := m.awaitGone(sctx, "b", "n-b"); !errdefs.Of(err).Is(errdefs.Timeout) || !strings.Contains(err.Error(), "n-b is still there") {
		t.Fatalf("a pod that stays: %v", err)
	}
}

// A create waiting for its pod outlasts the watches that end under it
// (an image pull takes longer than a watch lasts): it sees what the pod
// came to.
func TestAwaitPodAcrossWatches(t *testing.T) {
	core := fake.NewClientset()
	m := &Manager{Cluster: &Cluster{Core: core, Config: testConfig}}
	pod := addPod(t, core, "n-a")
	opened := cutWatches(core, 3)
	done := make(chan error, 1)
	go func() {
		_, err := m.await(ctx, "a", "n-a", "", 30*time.Second)
		done <- err
	}()
	select {
	case <-opened:
	case err := <-done:
		t.Fatalf("the wait ended with its watch: %v", err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: AgentContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "the image's agent would not start"}}}}}
	if _, err := core.CoreV1().Pods("nsys-cortex").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errdefs.Of(err).Is(errdefs.NotRunning) || !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("a pod that failed while its watches were cut: %v", err)
	}
}

// A watch cut at once, again and again, is not opened again in a busy
// loop: a second of it opens a few dozen at most.
func TestFollowBacksOff(t *testing.T) {
	var opens atomic.Int32
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	done, err := follow(fctx, func() (watch.Interface, error) {
		opens.Add(1)
		w := watch.NewFake()
		w.Stop()
		return w, nil
	}, nil, func(watch.Event) (bool, error) { return true, nil })
	if done || err != nil {
		t.Fatalf("follow: %v %v", done, err)
	}
	if n := opens.Load(); n < 2 || n > 30 {
		t.Fatalf("%d watches opened in a second", n)
	}
}
