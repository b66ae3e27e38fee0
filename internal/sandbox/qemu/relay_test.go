package qemu

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// A relay whose first port connection the guest never answers (it missed
// the host's arrival, or the connection waits in QEMU's listen queue
// behind a host that is gone quiet) hangs up and dials again, and gets
// through. The fake port serves one host at a time, as QEMU's chardev
// does, and says nothing to the first.
func TestRelayRedialsASilentPort(t *testing.T) {
	dir := sandboxtest.ShortTempDir(t)
	vm, err := net.Listen("unix", filepath.Join(dir, "vm-0.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	link, err := net.Listen("unix", filepath.Join(dir, "link.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	lock, err := os.Create(filepath.Join(dir, "port-0.lock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for n := 0; ; n++ {
			c, err := vm.Accept()
			if err != nil {
				return
			}
			if n > 0 {
				c.Write([]byte(boot.PortReady + "hello from the agent\n"))
			}
			buf := make([]byte, 64)
			for {
				if _, err := c.Read(buf); err != nil {
					break // the host hung up: the next one may come
				}
			}
			c.Close()
		}
	}()
	r := &relay{linkPath: filepath.Join(dir, "link.sock"), vmPath: filepath.Join(dir, "vm-0.sock"), lock: lock, silence: 300 * time.Millisecond}
	done := make(chan struct{})
	go func() { defer close(done); r.run() }()
	link.(*net.UnixListener).SetDeadline(time.Now().Add(20 * time.Second))
	c, err := link.Accept()
	if err != nil {
		t.Fatalf("the relay never reached the link: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello from the agent\n" {
		t.Errorf("through the relay: %q, %v", line, err)
	}
	c.Close()
	link.Close() // its socket goes: the relay ends
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay outlived its link")
	}
}
