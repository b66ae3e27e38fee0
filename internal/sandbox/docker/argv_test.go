package docker

import (
	"slices"
	"strings"
	"testing"
)

func spec() RunSpec {
	return RunSpec{Name: "nsys-cortex-0badc0de-web", ID: "web", HomeTag: "0badc0de", Image: "nsys-cortex-neuron:latest",
		UID: 1000, GID: 1000, Channel: "/home/op/.nsys-cortex/sockets/docker/web", Home: "/home/op/.nsys-cortex/overlays/web/home",
		Network: "none", MemoryBytes: 2 << 30, Pids: 1024, TmpBytes: 1 << 30, EnvFile: "/dev/fd/3",
		Env: []string{"PATH=/usr/bin:/bin", "ANTHROPIC_API_KEY=sk-secret"}, AgentArgs: []string{"--id", "web"}}
}

// The whole command line, pinned: any change to the boundary is a change
// to this test.
func TestRunArgsPinned(t *testing.T) {
	got, err := RunArgs(spec())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"run", "--detach", "--pull", "never",
		"--name", "nsys-cortex-0badc0de-web", "--hostname", "web",
		"--label", "nsys-cortex.managed=true", "--label", "nsys-cortex.id=web", "--label", "nsys-cortex.home=0badc0de",
		"--user", "1000:1000",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--read-only", "--tmpfs", "/tmp:rw,exec,nosuid,nodev,mode=1777,size=1073741824",
		"--log-driver", "json-file", "--log-opt", "max-size=1m", "--log-opt", "max-file=2",
		"--memory", "2147483648", "--memory-swap", "2147483648", "--pids-limit", "1024",
		"--network", "none",
		"--mount", "type=bind,source=/home/op/.nsys-cortex/sockets/docker/web,target=/run/nsys-cortex,readonly",
		"--mount", "type=bind,source=/home/op/.nsys-cortex/overlays/web/home,target=/home/agent",
		"--workdir", "/home/agent/workspace",
		"--env-file", "/dev/fd/3",
		"nsys-cortex-neuron:latest", "cortex-agent", "--id", "web"}
	if !slices.Equal(got, want) {
		t.Fatalf("docker %s\nwant\ndocker %s", strings.Join(got, " "), strings.Join(want, " "))
	}
	s := spec()
	s.Network, s.Publish, s.CPUs, s.Channel = "", true, 1.5, ""
	got, _ = RunArgs(s)
	line := strings.Join(got, " ")
	for _, w := range []string{"--cpus 1.5", "--publish 127.0.0.1:0:9999/tcp"} {
		if !strings.Contains(line, w) {
			t.Errorf("missing %q in %s", w, line)
		}
	}
	if strings.Contains(line, "--network") {
		t.Errorf("the daemon's default network was named: %s", line)
	}
}

// Security regressions: each hardening flag is there whatever the spec,
// nothing that would weaken the boundary ever is, and secrets stay off the
// command line.
func TestRunArgsBoundary(t *testing.T) {
	variants := []func(*RunSpec){
		func(*RunSpec) {},
		func(s *RunSpec) { s.Network, s.Publish, s.Channel = "", true, "" },
		func(s *RunSpec) { s.MemoryBytes, s.Pids, s.TmpBytes = 0, 0, 0 },
		func(s *RunSpec) { s.UID, s.GID = 2000123456, 2000123456 },
	}
	for i, v := range variants {
		s := spec()
		v(&s)
		args, err := RunArgs(s)
		if err != nil {
			t.Fatalf("variant %d: %v", i, err)
		}
		line := " " + strings.Join(args, " ") + " "
		for _, must := range []string{" --detach ", " --cap-drop ALL ", " --security-opt no-new-privileges ",
			" --read-only ", " --user ", " --label nsys-cortex.managed=true ", " --pull never "} {
			if !strings.Contains(line, must) {
				t.Errorf("variant %d lacks %q: %s", i, must, line)
			}
		}
		for _, never := range []string{"--privileged", "--cap-add", "docker.sock", "seccomp=unconfined", "apparmor=unconfined",
			" --init ", " --pid ", " --ipc ", " --userns ", " --uts ", "--device", "--volumes-from", " -v ", "--volume", "sk-secret", "ANTHROPIC_API_KEY", " --env ", " -e "} {
			if strings.Contains(line, never) {
				t.Errorf("variant %d holds %q: %s", i, never, line)
			}
		}
		mounts := 0
		for j, a := range args {
			if a == "--mount" {
				mounts++
				if !strings.HasPrefix(args[j+1], "type=bind,source=/") || strings.Contains(args[j+1], "readonly=false") {
					t.Errorf("mount %q", args[j+1])
				}
			}
			if a == "--tmpfs" && !strings.HasPrefix(args[j+1], "/tmp:") {
				t.Errorf("tmpfs %q", args[j+1])
			}
			if a == "--user" && (strings.HasPrefix(args[j+1], "0:") || strings.HasPrefix(args[j+1], "root")) {
				t.Errorf("user %q", args[j+1])
			}
		}
		if want := map[bool]int{false: 2, true: 1}[s.Publish]; mounts != want {
			t.Errorf("variant %d: %d mounts, want exactly %d", i, mounts, want)
		}
		if !s.Publish && !strings.Contains(line, "target=/run/nsys-cortex,readonly ") {
			t.Errorf("variant %d: the channel directory is not mounted read-only: %s", i, line)
		}
		if s.MemoryBytes > 0 && !strings.Contains(line, " --memory-swap ") {
			t.Errorf("variant %d: a memory ceiling without --memory-swap lets the container swap past it", i)
		}
	}
}

func TestRunArgsRefuses(t *testing.T) {
	for _, tc := range []struct {
		change func(*RunSpec)
		want   string
	}{
		{func(s *RunSpec) { s.UID, s.GID = 0, 0 }, "never runs as root"},
		{func(s *RunSpec) { s.Home = "/home/a,b" }, "','"},
		{func(s *RunSpec) { s.Channel = "relative/dir" }, "not an absolute path"},
		{func(s *RunSpec) { s.Publish, s.Channel = true, "" }, "no port to publish"},
		{func(s *RunSpec) { s.Publish, s.Network = true, "" }, "no channel directory"},
		{func(s *RunSpec) { s.Image = "" }, "needs an image"},
	} {
		s := spec()
		tc.change(&s)
		if _, err := RunArgs(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", s, err, tc.want)
		}
	}
}

func TestEnvFileContent(t *testing.T) {
	b, err := EnvFileContent([]string{"A=1", "B=two words", "C="})
	if err != nil || string(b) != "A=1\nB=two words\nC=\n" {
		t.Fatalf("%q %v", b, err)
	}
	for _, bad := range []string{"NOVALUE", "=x", "K=line\nbreak", "BAD KEY=1"} {
		if _, err := EnvFileContent([]string{bad}); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestHostname(t *testing.T) {
	for in, want := range map[string]string{"web": "web", "my_box.1": "my-box-1", "___": "neuron",
		strings.Repeat("a", 64): strings.Repeat("a", 63)} {
		if got := hostname(in); got != want {
			t.Errorf("hostname(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for out, want := range map[string]string{"127.0.0.1:32768\n": "127.0.0.1:32768", "0.0.0.0:4000\n[::]:4000\n": "127.0.0.1:4000",
		"[::1]:5000\n127.0.0.1:5001\n": "127.0.0.1:5001"} {
		if got, err := loopbackAddr(out); err != nil || got != want {
			t.Errorf("loopbackAddr(%q) = %q %v, want %q", out, got, err, want)
		}
	}
	if _, err := loopbackAddr("\n"); err == nil {
		t.Error("an empty docker port was read as an address")
	}
}
