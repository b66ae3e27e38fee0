package kube

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"
	extfake "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned/fake"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// honourUIDPreconditions makes f's deletes answer 409 Conflict, as the
// API server does, when their uid precondition is not the object's in tr.
func honourUIDPreconditions(f *k8stesting.Fake, tr k8stesting.ObjectTracker) {
	f.PrependReactor("delete", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		pre := d.GetDeleteOptions().Preconditions
		if pre == nil || pre.UID == nil {
			return false, nil, nil
		}
		obj, err := tr.Get(d.GetResource(), d.GetNamespace(), d.GetName())
		if err != nil {
			return false, nil, nil // the tracker answers NotFound
		}
		if m, ok := obj.(metav1.Object); ok && m.GetUID() != *pre.UID {
			return true, nil, apierrors.NewConflict(d.GetResource().GroupResource(), d.GetName(), fmt.Errorf("the uid precondition %s is not the object's, %s", *pre.UID, m.GetUID()))
		}
		return false, nil, nil
	})
}

// undoClaim takes the claim it made, and a Sandbox and home only while
// they are still the ones the claim held: one made again under the name
// meanwhile (another uid), or a home another Sandbox controls, is left.
func TestUndoClaimTakesOnlyWhatItHeld(t *testing.T) {
	const ns, name = "nsys-cortex", "nsys-cortex-warm-a"
	sandbox := func(uid types.UID) *sbv1.Sandbox {
		return &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid}}
	}
	home := func(owner types.UID) *corev1.PersistentVolumeClaim {
		yes := true
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: homeClaimOf(name), Namespace: ns, UID: "home-" + owner,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sbv1.GroupVersion.String(), Kind: "Sandbox", Name: name, UID: owner, Controller: &yes}}}}
	}
	claim := &extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: ObjectName("u"), Namespace: ns, UID: "claim"}}
	for _, tc := range []struct {
		what     string
		sandbox  *sbv1.Sandbox // in the cluster at the undo (nil: none)
		home     *corev1.PersistentVolumeClaim
		keepSB   bool
		keepHome bool
	}{
		{"the held Sandbox and its home", sandbox("held"), home("held"), false, false},
		{"a Sandbox made again under the name, with its home", sandbox("other"), home("other"), true, true},
		{"the held Sandbox gone, another's home under the name", nil, home("other"), false, true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			core, ag, ext := fake.NewClientset(), agentsfake.NewSimpleClientset(), extfake.NewSimpleClientset(claim.DeepCopy())
			honourUIDPreconditions(&core.Fake, core.Tracker())
			honourUIDPreconditions(&ag.Fake, ag.Tracker())
			honourUIDPreconditions(&ext.Fake, ext.Tracker())
			if tc.sandbox != nil {
				if _, err := ag.AgentsV1beta1().Sandboxes(ns).Create(ctx, tc.sandbox, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, tc.home, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			m := &Manager{Cluster: &Cluster{Core: core, Agents: ag, Claims: ext, Config: testConfig}}
			if err := m.undoClaim(ctx, "u", claim, sandbox("held")); err != nil {
				t.Fatal(err)
			}
			if _, err := ext.ExtensionsV1beta1().SandboxClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the claim is still there: %v", err)
			}
			_, err := ag.AgentsV1beta1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
			if kept := err == nil; tc.sandbox != nil && kept != tc.keepSB {
				t.Errorf("the Sandbox kept: %v, want %v", kept, tc.keepSB)
			}
			_, err = core.CoreV1().PersistentVolumeClaims(ns).Get(ctx, homeClaimOf(name), metav1.GetOptions{})
			if kept := err == nil; kept != tc.keepHome {
				t.Errorf("the home kept: %v, want %v", kept, tc.keepHome)
			}
		})
	}
}
