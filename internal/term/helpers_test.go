package term_test

import (
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/creack/pty"
)

// rawPty runs script on a PTY of this process and counts its output.
func rawPty(b testing.TB, script string) int64 {
	cmd := exec.Command("sh", "-c", script)
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n, _ := io.CopyBuffer(io.Discard, f, make([]byte, 64<<10))
	cmd.Wait()
	return n
}

func ioPipe() (io.Reader, io.Writer) { return io.Pipe() }

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// notifyWriter signals once per write.
type notifyWriter chan struct{}

func (n notifyWriter) Write(p []byte) (int, error) {
	select {
	case n <- struct{}{}:
	default:
	}
	return len(p), nil
}
