package boot

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// A host and a PID 1 of different builds: a config of a newer minor, with
// a field this build does not know, is read (the field ignored); one of
// another major is refused with an error that names both versions.
func TestDecodeTolerance(t *testing.T) {
	newer := func(version string) []byte {
		return []byte(`{"version":"` + version + `","id":"n1","workdir":"/w","env":["A=b"],"pids":5,` +
			`"futureField":{"anything":[1,2]},"hostname":"n1","network":"none"}`)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (string, error)
	}{
		{"VM", func(b []byte) (string, error) { c, err := DecodeVMConfig(b); return c.ID, err }},
		{"nsbox", func(b []byte) (string, error) { c, err := DecodeNsboxConfig(b); return c.ID, err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			nextMinor := "1." + itoa(Minor+1)
			if id, err := c.decode(newer(nextMinor)); err != nil || id != "n1" {
				t.Fatalf("a %s config with an unknown field: %q %v", nextMinor, id, err)
			}
			if id, err := c.decode([]byte(`{"id":"n1","workdir":"/w"}`)); err != nil || id != "n1" {
				t.Fatalf("a config from before versions: %q %v", id, err)
			}
			nextMajor := itoa(Major+1) + ".0"
			_, err := c.decode(newer(nextMajor))
			if !errors.Is(err, protocol.ErrIncompatible) || !strings.Contains(err.Error(), "version "+nextMajor) ||
				!strings.Contains(err.Error(), "reads "+Version()) {
				t.Fatalf("a %s config: %v; want an incompatibility naming %s and %s", nextMajor, err, nextMajor, Version())
			}
			// Another major is refused as such even where its fields no
			// longer decode as this build's.
			_, err = c.decode([]byte(`{"version":"` + nextMajor + `","id":["n1"],"env":"A=b"}`))
			if !errors.Is(err, protocol.ErrIncompatible) {
				t.Fatalf("a %s config with changed fields: %v", nextMajor, err)
			}
			if _, err := c.decode([]byte(`{"version":"one","id":"n1"}`)); err == nil {
				t.Fatal("a version that is no MAJOR.MINOR was accepted")
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The host's VM config reads back as written; at 1.0 it carries no version
// (a guest from before versions refuses unknown fields, a version among
// them).
func TestEncodeVMConfig(t *testing.T) {
	in := VMConfig{ID: "n1", Workdir: "/home/agent/workspace", Env: []string{"A=1"}, Pids: 7, NestedUserns: true,
		Egress: "127.0.0.1:3128", VsockPort: -1, Ports: 4, Secret: "s", Root: true}
	b, err := EncodeVMConfig(&in)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	json.Unmarshal(b, &keys)
	if _, ok := keys["version"]; ok != (Version() != "1.0") {
		t.Errorf("version written: %v, at %s (%s)", ok, Version(), b)
	}
	out, err := DecodeVMConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if Version() == "1.0" {
		out.Version = ""
	} else if out.Version != Version() {
		t.Errorf("version %q, want %q", out.Version, Version())
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("read back\n %+v\nwant\n %+v", out, in)
	}
	if in.Version != "" {
		t.Error("EncodeVMConfig changed its argument")
	}
}
