package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
)

// The neuron's log of a detached container. The daemon keeps what the
// agent prints (json-file, capped: RunArgs); SyncLog copies what is new
// into the neuron's log file. `docker logs --since T` gives every line
// stamped at or after T; the mark kept in the overlay (.log-since, the
// host's) holds the latest stamp copied and a digest of each line copied
// with that very stamp (docker gives the pieces of a line longer than
// 16 KiB one stamp), so each line is copied once, by whichever host
// process syncs first (under an flock of the mark).

const (
	// syncCap bounds what one sync copies; the rest comes with the next.
	// A container of an older version, whose daemon log may be uncapped,
	// cannot make one sync hold gigabytes.
	syncCap = 4 << 20
	// syncLockWait bounds the wait for another process's sync.
	syncLockWait = 5 * time.Second
)

// logMark is where the last sync stopped.
type logMark struct {
	at   time.Time
	seen map[string]bool // digests of the lines stamped at
}

func digest(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:12])
}

// parseMark reads a mark: the stamp (seconds.nanoseconds) on the first
// line, a digest per line after it.
func parseMark(b []byte) logMark {
	m := logMark{seen: map[string]bool{}}
	lines := strings.Split(string(b), "\n")
	sec, nsec, ok := strings.Cut(strings.TrimSpace(lines[0]), ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	n, err2 := strconv.ParseInt(nsec, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return m
	}
	m.at = time.Unix(s, n)
	for _, d := range lines[1:] {
		if d = strings.TrimSpace(d); d != "" {
			m.seen[d] = true
		}
	}
	return m
}

func (m logMark) bytes() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d.%09d\n", m.at.Unix(), m.at.Nanosecond())
	for d := range m.seen {
		b.WriteString(d + "\n")
	}
	return b.Bytes()
}

// SyncLog appends what neuron id's container printed since the last sync
// to the neuron's log (lifecycle.LogSyncer); it is called once more before
// the container is removed (remove).
func (r *runtime) SyncLog(lay layout.Layout, id string) {
	// The overlay directory is the host's (the container has home/ below it).
	f, err := os.OpenFile(filepath.Join(lay.OverlayDir(id), ".log-since"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if !flockWithin(f, syncLockWait) {
		return // another process syncs: it copies these lines
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	mark := parseMark(b)
	args := []string{"logs", "--timestamps"}
	if !mark.at.IsZero() {
		args = append(args, "--since", fmt.Sprintf("%d.%09d", mark.at.Unix(), mark.at.Nanosecond()))
	}
	bin, err := dockerBin()
	if err != nil {
		return
	}
	log, err := lifecycle.OpenLog(lay, id)
	if err != nil {
		return
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		return
	}
	// Both streams through one pipe keep the lines in the order docker
	// gives them.
	cmd := exec.CommandContext(ctx, bin, append(args, ContainerName(lay, id))...)
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return
	}
	next, copied := copyNew(bufio.NewWriter(log), pr, mark)
	pr.Close() // past the cap: the client's next write fails and it ends
	if cmd.Wait() != nil && copied == 0 {
		return // no such container (any more), or no daemon to ask
	}
	if next.at.After(mark.at) || len(next.seen) != len(mark.seen) {
		f.Truncate(0)
		f.WriteAt(next.bytes(), 0)
	}
}

// copyNew copies the lines of `docker logs --timestamps` in r that mark
// has not seen to w, without their stamps, up to syncCap bytes, and
// returns the mark after them and how many bytes it copied.
func copyNew(w *bufio.Writer, r io.Reader, mark logMark) (logMark, int) {
	defer w.Flush()
	br := bufio.NewReaderSize(r, 64<<10)
	copied := 0
	for copied < syncCap {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Longer than docker's pieces: the rest is dropped.
			line = append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			line = append(line, '\n')
		}
		if len(line) == 0 {
			break
		}
		stamp, text, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(" "))
		t, perr := time.Parse(time.RFC3339Nano, string(stamp))
		switch {
		case !ok || perr != nil || t.Before(mark.at):
			// not a line of the container's, or one copied already
		case t.Equal(mark.at) && mark.seen[digest(text)]:
			// copied already, by the last sync
		default:
			if t.After(mark.at) {
				mark = logMark{at: t, seen: map[string]bool{}}
			}
			mark.seen[digest(text)] = true
			w.Write(text)
			w.WriteByte('\n')
			copied += len(text) + 1
		}
		if err != nil {
			break
		}
	}
	return mark, copied
}

// flockWithin takes an exclusive flock of f, waiting at most d.
func flockWithin(f *os.File, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return true
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			return false
		}
	}
}
