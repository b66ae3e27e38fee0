package main

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/podtoken"
)

// -trust-key and -pod-info: the check takes the host's token for this
// pod only, and a missing or malformed key or identity stops the agent.
func TestPodTokenCheck(t *testing.T) {
	dir := t.TempDir()
	priv, _ := podtoken.NewKey()
	key := filepath.Join(dir, "token.pub")
	os.WriteFile(key, []byte(podtoken.PublicText(priv.Public().(ed25519.PublicKey))), 0o444)
	info := filepath.Join(dir, "pod")
	os.Mkdir(info, 0o755)
	self := podtoken.Identity{Namespace: "ns", Pod: "n-a", UID: "u1"}
	for f, v := range map[string]string{"namespace": self.Namespace, "name": self.Pod, "uid": self.UID} {
		os.WriteFile(filepath.Join(info, f), []byte(v), 0o444)
	}
	pub := priv.Public().(ed25519.PublicKey)
	check, err := podTokenCheck(key, podtoken.Fingerprint(pub), info)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := podtoken.Sign(priv, self, time.Minute, time.Now())
	other, _ := podtoken.Sign(priv, podtoken.Identity{Namespace: "ns", Pod: "n-b", UID: "u2"}, time.Minute, time.Now())
	if check(good) != nil || check(other) == nil || check("") == nil {
		t.Error("the check takes the wrong tokens")
	}
	os.WriteFile(filepath.Join(dir, "bad.pub"), []byte("ssh-ed25519 AAAA"), 0o444)
	// The trust ConfigMap made again with another key (an attacker's,
	// who could then sign tokens pods take): a pod pinned to the host's
	// key does not start.
	other2, _ := podtoken.NewKey()
	for name, args := range map[string][3]string{
		"no pod info":          {key, "", ""},
		"no key file":          {filepath.Join(dir, "none"), "", info},
		"a bad key":            {filepath.Join(dir, "bad.pub"), "", info},
		"no such info":         {key, "", filepath.Join(dir, "none")},
		"another key's pin":    {key, podtoken.Fingerprint(other2.Public().(ed25519.PublicKey)), info},
		"a pin that is no pin": {key, "x", info},
	} {
		if _, err := podTokenCheck(args[0], args[1], args[2]); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
}
