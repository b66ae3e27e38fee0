package firecracker

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/layout"
)

func baseSpec() JailSpec {
	return JailSpec{ID: "0badcafe-demo", ExecFile: "/usr/local/bin/firecracker", UID: 2000123456, GID: 2000123456,
		ChrootBase: "/home/u/.nsys-cortex/jail", CgroupVersion: 2, ParentCgroup: ParentCgroup,
		Cgroups:        CgroupSettings(1<<30, 1.5),
		ResourceLimits: map[string]uint64{"fsize": 8<<30 + 1<<20, "no-file": 2048}, APISock: jailAPISock}
}

// The jailer's command line, flag by flag: a change here is a change of
// the boundary and must be deliberate.
func TestJailerArgsPinned(t *testing.T) {
	got, err := JailerArgs(baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--id", "0badcafe-demo",
		"--exec-file", "/usr/local/bin/firecracker",
		"--uid", "2000123456", "--gid", "2000123456",
		"--chroot-base-dir", "/home/u/.nsys-cortex/jail",
		"--cgroup-version", "2",
		"--parent-cgroup", "nsys-cortex",
		"--cgroup", "cpu.max=150000 100000",
		"--cgroup", "memory.max=1140850688",
		"--resource-limit", "fsize=8590983168",
		"--resource-limit", "no-file=2048",
		"--", "--api-sock", "/api.sock",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("jailer argv changed:\n got %q\nwant %q", got, want)
	}
	for _, a := range got {
		switch a {
		case "--daemonize", "--new-pid-ns", "--config-file", "--no-api", "--no-seccomp":
			t.Errorf("the default command line must not carry %s", a)
		}
	}
}

func TestJailerArgsOptionalFlags(t *testing.T) {
	s := baseSpec()
	s.NetNS, s.NewPIDNS, s.Daemonize = "/var/run/netns/n1", true, true
	got, err := JailerArgs(s)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(got, " ")
	for _, want := range []string{"--chroot-base-dir /home/u/.nsys-cortex/jail --netns /var/run/netns/n1 --cgroup-version 2",
		"no-file=2048 --new-pid-ns --daemonize -- --api-sock /api.sock"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
}

func TestJailerArgsRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		mod  func(*JailSpec)
		says string
	}{
		"root uid":       {func(s *JailSpec) { s.UID = 0 }, "never runs as root"},
		"root gid":       {func(s *JailSpec) { s.GID = 0 }, "never runs as root"},
		"bad id":         {func(s *JailSpec) { s.ID = "a_b" }, "jail id"},
		"long id":        {func(s *JailSpec) { s.ID = strings.Repeat("a", 65) }, "jail id"},
		"relative exec":  {func(s *JailSpec) { s.ExecFile = "firecracker" }, "absolute path"},
		"exec name":      {func(s *JailSpec) { s.ExecFile = "/usr/bin/qemu" }, `contains "firecracker"`},
		"relative base":  {func(s *JailSpec) { s.ChrootBase = "jail" }, "chroot base"},
		"cgroup version": {func(s *JailSpec) { s.CgroupVersion = 3 }, "cgroup version"},
		"cgroup key":     {func(s *JailSpec) { s.Cgroups = map[string]string{"memory": "1"} }, "<controller>.<file>"},
		"cgroup value":   {func(s *JailSpec) { s.Cgroups = map[string]string{"memory.max": "1\nx"} }, "<controller>.<file>"},
		"cgroup path":    {func(s *JailSpec) { s.Cgroups = map[string]string{"../memory.max": "1"} }, "<controller>.<file>"},
		"rlimit":         {func(s *JailSpec) { s.ResourceLimits = map[string]uint64{"nproc": 1} }, "fsize and no-file"},
		"socket":         {func(s *JailSpec) { s.APISock = "api.sock" }, "inside the jail"},
		"parent cgroup":  {func(s *JailSpec) { s.ParentCgroup = "../x" }, "parent cgroup"},
	} {
		s := baseSpec()
		c.mod(&s)
		if _, err := JailerArgs(s); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, c.says)
		}
	}
}

func TestJailID(t *testing.T) {
	lay, _ := layout.New("/home/u/.nsys-cortex", "")
	other, _ := layout.New("/home/v/.nsys-cortex", "")
	plain := JailID(lay, "demo-1")
	if !strings.HasSuffix(plain, "-demo-1") || len(plain) != len("01234567-demo-1") || !jailIDOK(plain) {
		t.Errorf("a jailer-safe id keeps its name: %q", plain)
	}
	if JailID(other, "demo-1") == plain {
		t.Error("two homes share a jail id")
	}
	for _, id := range []string{"a.b", "a_b", strings.Repeat("x", 64)} {
		j := JailID(lay, id)
		if !jailIDOK(j) || !strings.Contains(j, "-h") {
			t.Errorf("%q: jail id %q is not a hashed jailer-safe id", id, j)
		}
		if JailID(lay, id) != j {
			t.Errorf("%q: jail id not stable", id)
		}
	}
	if JailID(lay, "a.b") == JailID(lay, "a_b") {
		t.Error("distinct ids share a jail")
	}
}

func TestCgroupSettings(t *testing.T) {
	got := CgroupSettings(512<<20, 0.5)
	want := map[string]string{"memory.max": "603979776", "cpu.max": "50000 100000"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v (guest memory + 64 MiB for the VMM; half a CPU)", got, want)
	}
}

func TestBootArgsPinned(t *testing.T) {
	got := BootArgs(BootSpec{})
	want := "reboot=k panic=1 pci=off i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd 8250.nr_uarts=0 quiet"
	if got != want {
		t.Fatalf("boot args changed:\n got %q\nwant %q", got, want)
	}
	for _, banned := range []string{"nomodule", "acpi=off", "init=", "cortex."} {
		if strings.Contains(got, banned) {
			t.Errorf("boot args carry %s", banned)
		}
	}
	if got := BootArgs(BootSpec{Console: true}); !strings.Contains(got, "console=ttyS0") || strings.Contains(got, "8250.nr_uarts=0") {
		t.Errorf("console: %q", got)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"8G": 8 << 30, "512M": 512 << 20, "64k": 64 << 10, "4096": 4096} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "1T", "x"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
