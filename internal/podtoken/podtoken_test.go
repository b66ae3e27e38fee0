package podtoken

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var pod = Identity{Namespace: "nsys-cortex", Pod: "n-web", UID: "6f1c2b1e-0000-4000-8000-000000000001"}

func TestSignVerify(t *testing.T) {
	priv, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublic(PublicText(priv.Public().(ed25519.PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	tok, err := Sign(priv, pod, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Verify(pub, tok, pod, now.Add(30*time.Second)); err != nil || c.Identity != pod {
		t.Fatalf("a good token: %+v %v", c, err)
	}
	other, _ := NewKey()
	payload, sig, _ := strings.Cut(tok, ".")
	// A token whose claims say more than the host signed.
	var c Claims
	b, _ := base64.RawURLEncoding.DecodeString(payload)
	json.Unmarshal(b, &c)
	c.Expiry += 3600
	forged, _ := json.Marshal(c)
	longer, _ := Sign(priv, pod, time.Minute, now)
	for name, tc := range map[string]struct {
		pub  ed25519.PublicKey
		tok  string
		self Identity
		at   time.Time
	}{
		"another key":           {other.Public().(ed25519.PublicKey), tok, pod, now},
		"another pod":           {pub, tok, Identity{pod.Namespace, "n-other", pod.UID}, now},
		"the pod made again":    {pub, tok, Identity{pod.Namespace, pod.Pod, "another-uid"}, now},
		"another namespace":     {pub, tok, Identity{"default", pod.Pod, pod.UID}, now},
		"expired":               {pub, tok, pod, now.Add(time.Minute)},
		"claims changed":        {pub, base64.RawURLEncoding.EncodeToString(forged) + "." + sig, pod, now},
		"no signature":          {pub, payload, pod, now},
		"oversize":              {pub, strings.Repeat("A", 5000) + "." + sig, pod, now},
		"garbage":               {pub, "..", pod, now},
		"a pod without its uid": {pub, longer, Identity{pod.Namespace, pod.Pod, ""}, now},
	} {
		if _, err := Verify(tc.pub, tc.tok, tc.self, tc.at); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Sign(priv, pod, time.Hour, now); err == nil {
		t.Error("a token of an hour was signed")
	}
	if _, err := Sign(priv, Identity{Namespace: "ns"}, time.Minute, now); err == nil {
		t.Error("a token for no pod was signed")
	}
	if _, err := ParsePublic("ssh-ed25519 AAAA"); err == nil {
		t.Error("a key of another form was taken")
	}
}

func TestReadIdentity(t *testing.T) {
	dir := t.TempDir()
	for f, v := range map[string]string{"namespace": "nsys-cortex\n", "name": "n-web", "uid": pod.UID} {
		os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644)
	}
	if id, err := ReadIdentity(dir); err != nil || id != pod {
		t.Fatalf("%+v %v", id, err)
	}
	os.WriteFile(filepath.Join(dir, "uid"), nil, 0o644)
	if _, err := ReadIdentity(dir); err == nil {
		t.Error("an empty uid was taken")
	}
}

// FuzzVerify: no token, however made, opens a pod it does not name, or
// panics the agent.
func FuzzVerify(f *testing.F) {
	priv, _ := NewKey()
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Unix(1_800_000_000, 0)
	good, _ := Sign(priv, pod, time.Minute, now)
	f.Add(good)
	f.Add("x.y")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := Verify(pub, tok, pod, now)
		if err == nil && (tok != good || c.Identity != pod) {
			t.Fatalf("a token the host did not sign opened the pod: %q", tok)
		}
	})
}
