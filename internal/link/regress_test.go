//go:build linux

package link_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// A second connection while the first is up is refused, and the host
// survives it (it used to panic).
func TestSecondConnectionIsRefused(t *testing.T) {
	l, ev := newListener(t)
	dialFake(t, l, agentHello())
	first := connected(t, l)
	ev.wait(t, link.Connected)
	conn, err := protocol.DialUnix(context.Background(), l.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data, _ := json.Marshal(agentHello())
	protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindHello, Data: data}, nil)
	if e := ev.wait(t, link.Refused); !strings.Contains(e.Err.Error(), "second connection") {
		t.Fatalf("%v", e.Err)
	}
	if c, err := l.Conn(); err != nil || c != first {
		t.Fatalf("the first connection was replaced: %v", err)
	}
}

// stallOnce is a consumer that is busy for a moment on its first write.
type stallOnce struct {
	stalled bool
	buf     bytes.Buffer
}

func (w *stallOnce) Write(p []byte) (int, error) {
	if !w.stalled {
		w.stalled = true
		// Pacing, not a wait for anything: a consumer slower than the
		// 200 ms the agent once gave the pipe's tail is what is tested.
		time.Sleep(time.Second)
	}
	return w.buf.Write(p)
}

// Output still in the pipe when the command exits is delivered even when
// the host reads slowly (it used to be cut off after 200 ms).
func TestStreamedTailSurvivesASlowConsumer(t *testing.T) {
	p := newPair(t)
	w := &stallOnce{}
	res, err := p.client.Exec(context.Background(), &link.ExecRequest{
		Command: protocol.Command{Shell: "head -c 4194304 /dev/zero; printf AAAA; sleep 0.1; printf BBBB"},
		Stdout:  w, Timeout: link.NoTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.buf.Len(); got != 4194304+8 || !bytes.HasSuffix(w.buf.Bytes(), []byte("AAAABBBB")) || res.StdoutTruncated {
		t.Fatalf("received %d bytes (truncated %v)", got, res.StdoutTruncated)
	}
}

// A command that leaves a child holding its stdin (and never reading) does
// not hold up the exec, whatever the size of the input. The child outlives
// the wait below by far: an exec held up by it never ends in time.
func TestStdinHolderDoesNotHang(t *testing.T) {
	p := newPair(t)
	holder := fmt.Sprintf("sleep %d", 3600+os.Getpid()%100000)
	t.Cleanup(func() { exec.Command("pkill", "-KILL", "-x", "-f", holder).Run() })
	for _, size := range []int{200, 200 << 10} {
		type result struct {
			res *link.ExecResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := p.client.Exec(context.Background(), &link.ExecRequest{
				Command: protocol.Command{Shell: "exec 3<&0; " + holder + " <&3 & exit 0"},
				Stdin:   bytes.NewReader(make([]byte, size)), Timeout: link.NoTimeout})
			done <- result{res, err}
		}()
		r := waittest.Recv(t, 2*time.Minute, fmt.Sprintf("the exec with %d bytes of stdin", size), done)
		if r.err != nil || r.res.ExitCode != 0 {
			t.Fatalf("%v %+v", r.err, r.res)
		}
	}
}

// A listing too big for one frame comes in pages, and the connection lives.
func TestHugeListing(t *testing.T) {
	p := newPair(t)
	d := filepath.Join(p.root, "many")
	os.MkdirAll(d, 0o755)
	for i := 0; i < 3000; i++ {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("%04d-%s", i, strings.Repeat("x", 240))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	entries, err := p.client.List(ctx, "many")
	if err != nil || len(entries) != 3000 || !strings.HasPrefix(entries[2999].Name, "2999-") {
		t.Fatalf("%d entries, %v", len(entries), err)
	}
	if _, err := p.client.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

// The host may close a connection and keep listening: the agent dials again.
func TestAgentRedialsAListeningHost(t *testing.T) {
	p := newPair(t)
	c, err := p.link.Conn()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.link.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Files that report no size (/proc) are read to their real end: kallsyms is
// megabytes, and st_size says 0.
func TestReadProcFiles(t *testing.T) {
	p := newPair(t, func(c *agent.Config) { c.Root = "/"; c.Workdir = "" })
	want, err := os.ReadFile("/proc/kallsyms")
	if err != nil || len(want) < 100<<10 {
		t.Skipf("/proc/self/smaps is too small to show anything (%d bytes)", len(want))
	}
	got, err := p.client.ReadFile(context.Background(), "/proc/kallsyms")
	if err != nil || len(got) < len(want)*9/10 {
		t.Fatalf("read %d bytes of about %d: %v", len(got), len(want), err)
	}
}

// An agent that answers with sizes that do not add up is an error, never a
// host panic.
func TestHostileSizesAreErrors(t *testing.T) {
	l, _ := newListener(t)
	fa := dialFake(t, l, agentHello())
	c := link.NewClient(connected(t, l))
	go func() {
		for {
			f := fa.read()
			if f == nil {
				return
			}
			switch f.Cmd {
			case protocol.CmdStat:
				fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: json.RawMessage(`{"name":"x","type":"file","size":10}`)}, nil)
			case protocol.CmdFileRead:
				body := make([]byte, 5000) // far more than the 10 bytes asked for
				res, _ := json.Marshal(protocol.FileReadResult{N: len(body), Size: 10, EOF: true})
				fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: res}, body)
			case protocol.CmdExec:
				res, _ := json.Marshal(protocol.ExecResult{StdoutLen: 10, StderrLen: -5})
				fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: res}, []byte("hello"))
			}
		}
	}()
	ctx := context.Background()
	if _, err := c.ReadFile(ctx, "x"); !protocol.HasCode(err, protocol.CodeInternal) {
		t.Fatalf("read: %v", err)
	}
	if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"x"}}}); !protocol.HasCode(err, protocol.CodeInternal) {
		t.Fatalf("exec: %v", err)
	}
}

// A listing is the agent's word, and the agent may be the neuron's own
// code: names that are not single path elements, a name given twice (one
// way to show a name first as a symlink, then as a directory), unknown
// types and oversized pages are refused, and set-id bits never reach the
// caller.
func TestHostileListingsAreRefused(t *testing.T) {
	cases := map[string][]string{
		"dot-dot":        {`{"name":"..","type":"dir"}`},
		"slash":          {`{"name":"../x/y","type":"file"}`},
		"nul":            {`{"name":"a\u0000b","type":"file"}`},
		"empty":          {`{"name":"","type":"file"}`},
		"unknown type":   {`{"name":"a","type":"socket"}`},
		"target on file": {`{"name":"a","type":"file","target":"/etc"}`},
		"empty target":   {`{"name":"a","type":"symlink"}`},
		"negative size":  {`{"name":"a","type":"file","size":-1}`},
		// The same name on two pages: first a symlink, then a directory.
		"twice across pages": {`{"name":"l","type":"symlink","target":"/root/.ssh"}`, `{"name":"l","type":"dir"}`},
	}
	for name, pages := range cases {
		t.Run(name, func(t *testing.T) {
			l, _ := newListener(t)
			fa := dialFake(t, l, agentHello())
			c := link.NewClient(connected(t, l))
			go func() {
				for i := 0; ; i++ {
					f := fa.read()
					if f == nil || i >= len(pages) {
						return
					}
					more := i < len(pages)-1
					data := fmt.Sprintf(`{"path":"/d","entries":[%s],"more":%v,"next":%d,"total":%d}`, pages[i], more, i+1, len(pages))
					fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: json.RawMessage(data)}, nil)
				}
			}()
			entries, err := c.List(context.Background(), "/d")
			if err == nil {
				t.Fatalf("accepted %+v", entries)
			}
			if !strings.Contains(err.Error(), "refused") {
				t.Errorf("error %q does not say the answer was refused", err)
			}
		})
	}
	t.Run("set-id bits", func(t *testing.T) {
		l, _ := newListener(t)
		fa := dialFake(t, l, agentHello())
		c := link.NewClient(connected(t, l))
		go func() {
			f := fa.read()
			if f == nil {
				return
			}
			mode := uint32(0o755 | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | fs.ModeDevice)
			data := fmt.Sprintf(`{"path":"/d","entries":[{"name":"x","type":"file","mode":%d}],"total":1}`, mode)
			fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: json.RawMessage(data)}, nil)
		}()
		entries, err := c.List(context.Background(), "/d")
		if err != nil || len(entries) != 1 || entries[0].Mode != 0o755 {
			t.Fatalf("%+v %v, want mode 0755 only", entries, err)
		}
	})
}
