// Command hostile is the neuron's side of the boundary suite
// (sandboxtest): what a hostile neuron does to host code that acts on its
// files. The suite copies it into a neuron and runs it there.
//
//	hostile swap DIR TARGET N   make N files f0.. and N symlinks l0.. -> TARGET
//	                            in DIR, then exchange each pair (renameat2
//	                            RENAME_EXCHANGE) as fast as it can, until killed
//	hostile impostor DIR SECS   stop the agent (its parent), then for SECS
//	                            seconds answer every host socket in DIR as
//	                            the agent would, forging "uid=0(root)" for
//	                            every exec; then let the agent go on
//	hostile flood ADDR N        open N connections to the TCP address ADDR,
//	                            each sending a line of garbage: every one a
//	                            line in the agent's log
//	hostile fds                 read every descriptor from 3 up it inherited
//	                            (printing what it reads) and write INJECTED
//	                            to each
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: hostile swap DIR TARGET N")
	}
	switch os.Args[1] {
	case "swap":
		if len(os.Args) != 5 {
			fail("usage: hostile swap DIR TARGET N")
		}
		n, err := strconv.Atoi(os.Args[4])
		if err != nil || n < 1 {
			fail("N must be a positive number")
		}
		swap(os.Args[2], os.Args[3], n)
	case "impostor":
		if len(os.Args) != 4 {
			fail("usage: hostile impostor DIR SECS")
		}
		secs, err := strconv.Atoi(os.Args[3])
		if err != nil || secs < 1 {
			fail("SECS must be a positive number")
		}
		impostor(os.Args[2], time.Duration(secs)*time.Second)
	case "flood":
		if len(os.Args) != 4 {
			fail("usage: hostile flood ADDR N")
		}
		n, err := strconv.Atoi(os.Args[3])
		if err != nil || n < 1 {
			fail("N must be a positive number")
		}
		for range n {
			if c, err := net.Dial("tcp", os.Args[2]); err == nil {
				c.Write([]byte("\x1b]0;garbage\x07\n"))
				c.Close()
			}
		}
	case "fds":
		for fd := 3; fd < 1024; fd++ {
			buf := make([]byte, 4096)
			if n, err := unix.Pread(fd, buf, 0); err == nil {
				os.Stdout.Write(buf[:n])
			} else if n, err := unix.Read(fd, buf); err == nil {
				os.Stdout.Write(buf[:n])
			}
			unix.Write(fd, []byte("INJECTED\n"))
		}
	default:
		fail("unknown command " + os.Args[1])
	}
}

func swap(dir, target string, n int) {
	fs, ls := make([]string, n), make([]string, n)
	for i := range n {
		f, l := filepath.Join(dir, fmt.Sprint("f", i)), filepath.Join(dir, fmt.Sprint("l", i))
		fs[i], ls[i] = f, l
		if err := os.WriteFile(f, []byte("mine\n"), 0o644); err != nil {
			fail(err.Error())
		}
		os.Remove(l)
		if err := os.Symlink(target, l); err != nil {
			fail(err.Error())
		}
	}
	fmt.Println("swapping")
	for {
		for i := range n {
			if err := unix.Renameat2(unix.AT_FDCWD, fs[i], unix.AT_FDCWD, ls[i], unix.RENAME_EXCHANGE); err != nil {
				fail("renameat2: " + err.Error())
			}
		}
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "hostile:", msg)
	os.Exit(2)
}

// impostor is the review's reproduction of a neuron that takes its agent's
// place: SIGSTOP the agent (commands run as its user), dial every host
// socket in the channel directory, say hello as the agent and forge every
// answer. The host must refuse it at the hello.
func impostor(dir string, d time.Duration) {
	agent := os.Getppid()
	if err := unix.Kill(agent, unix.SIGSTOP); err != nil {
		fail("stopping the agent: " + err.Error())
	}
	defer unix.Kill(agent, unix.SIGCONT)
	fmt.Println("impostor: agent", agent, "stopped")
	deadline := time.Now().Add(d)
	tried := map[string]bool{}
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name := filepath.Join(dir, e.Name())
			if !strings.HasSuffix(name, ".sock") || tried[name] {
				continue
			}
			tried[name] = true
			go pose(name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pose answers one host socket as a forged agent.
func pose(path string) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return
	}
	defer c.Close()
	caps := []string{}
	for _, cmd := range protocol.Commands() {
		caps = append(caps, string(cmd))
	}
	hello, _ := json.Marshal(protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleAgent, Software: "cortex-agent impostor",
		Caps: caps, Neuron: os.Getenv("NSYS_CORTEX_NEURON"), PID: os.Getpid(), Proof: strings.Repeat("0", 64),
		MaxBody: protocol.MaxBody, Window: protocol.DefaultWindow})
	r := protocol.NewReader(c, protocol.MaxBody)
	if _, err := r.Read(); err != nil { // the host's hello
		return
	}
	if err := protocol.WriteFrame(c, &protocol.Header{Kind: protocol.KindHello, Data: hello}, nil); err != nil {
		return
	}
	for {
		f, err := r.Read()
		if err != nil {
			return
		}
		if f.Kind != protocol.KindRequest {
			continue
		}
		out := []byte("uid=0(root) gid=0(root) groups=0(root) forged-by-the-impostor\n")
		res, _ := json.Marshal(protocol.ExecResult{ExitCode: 0, StdoutLen: int64(len(out))})
		protocol.WriteFrame(c, &protocol.Header{Kind: protocol.KindEvent, ID: f.ID, Stream: protocol.StreamStdout}, out)
		protocol.WriteFrame(c, &protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: res}, nil)
	}
}
