package kube

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// The keys' Secret: none is no keys; the first change makes it, labelled
// Cortex's; a change that loses a race (409 on the update, or another
// making the Secret first) is done again on the winner's bytes; a refusal
// is an error that names the Secret's verb.
// SecretKeys keeps the keys' use beside them (apikey.SharedUse).
var _ apikey.SharedUse = (*SecretKeys)(nil)

func TestSecretKeys(t *testing.T) {
	core := fake.NewClientset()
	s := &SecretKeys{Core: core, Namespace: "nsys-cortex", Name: "nsys-cortex-api-keys"}
	if b, v, err := s.Load(); err != nil || b != nil || v != "" {
		t.Fatalf("no Secret: %q %q %v", b, v, err)
	}
	// Another makes the Secret between this change's read and its create.
	raced := false
	core.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, s.Name)
	})
	calls := 0
	if err := s.Change(func(b []byte) ([]byte, error) { calls++; return append(b, 'a'), nil }); err != nil {
		t.Fatal(err)
	}
	if b, _, err := s.Load(); err != nil || string(b) != "a" || calls != 2 {
		t.Fatalf("after the first change: %q %v (%d calls)", b, err, calls)
	}
	sec, _ := core.CoreV1().Secrets("nsys-cortex").Get(ctx, s.Name, metav1.GetOptions{})
	if sec.Labels[LabelManaged] != managedBy {
		t.Errorf("the Secret's labels: %v", sec.Labels)
	}
	// An update that conflicts once is made again on the bytes read anew.
	conflicted := false
	core.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicted {
			return false, nil, nil
		}
		conflicted = true
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, s.Name, errors.New("changed"))
	})
	calls = 0
	if err := s.Change(func(b []byte) ([]byte, error) { calls++; return append(b, 'b'), nil }); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := s.Load(); string(b) != "ab" || calls != 2 {
		t.Fatalf("after a conflicted change: %q (%d calls)", b, calls)
	}
	// When the keys were last used: beside them, in the same Secret, the
	// keys untouched.
	if b, err := s.LoadUsed(); err != nil || b != nil {
		t.Fatalf("no use yet: %q %v", b, err)
	}
	if err := s.ChangeUsed(func(b []byte) ([]byte, error) { return append(b, 'u'), nil }); err != nil {
		t.Fatal(err)
	}
	if b, err := s.LoadUsed(); err != nil || string(b) != "u" {
		t.Fatalf("the use: %q %v", b, err)
	}
	if b, _, _ := s.Load(); string(b) != "ab" {
		t.Fatalf("the keys after a change of their use: %q", b)
	}
	// fn's error is the change's, and nothing is written.
	if err := s.Change(func([]byte) ([]byte, error) { return nil, errors.New("no such key") }); err == nil || err.Error() != "no such key" {
		t.Errorf("fn's error: %v", err)
	}
	core.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, s.Name, errors.New("RBAC"))
	})
	if _, _, err := s.Load(); !errdefs.Of(err).Is(errdefs.Permission) || !strings.Contains(err.Error(), "forbids get on secrets") {
		t.Errorf("a forbidden read: %v", err)
	}
}
