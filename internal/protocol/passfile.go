package protocol

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// CapPassFiles, in an agent's hello caps, says the agent answers a request
// that asks for it (FileWriteArgs.PassFile, FileReadArgs.PassFile) with the
// open file itself: the response frame carries its descriptor (SCM_RIGHTS,
// Header.File). An agent announces it only on a Unix socket connection,
// and a host asks only on one. The host then copies the bytes kernel to
// kernel without resolving any path of the neuron: the agent resolved it,
// as the neuron sees it, with the neuron's rights.
const CapPassFiles = "pass_files"

// maxQueuedFiles bounds the descriptors a FileReader holds that no frame has
// claimed yet: an agent sending descriptors nobody asked for costs the host
// at most this many.
const maxQueuedFiles = 4

// scmMaxFD is the most descriptors one SCM_RIGHTS message carries (the
// kernel's SCM_MAX_FD), and one recvmsg returns at most one message's.
// The control buffer has room for all of them: a descriptor the kernel
// drops for want of room is closed inside the recvmsg, in the host's
// thread, where a socket lingering on its close would hold that thread.
const scmMaxFD = 253

// FileReader reads a Unix socket connection, keeping the descriptors that
// arrive with its bytes (SCM_RIGHTS) for the frames that declare them.
// Descriptors arrive no later than the first byte of the frame they were
// sent with, so a frame whose header says File takes the oldest one.
type FileReader struct {
	c      *net.UnixConn
	oob    []byte
	queued []*os.File
}

// NewFileReader returns a FileReader on c.
func NewFileReader(c *net.UnixConn) *FileReader {
	return &FileReader{c: c, oob: make([]byte, syscall.CmsgSpace(scmMaxFD*4))} // 4: the size of an int32 descriptor
}

// Read reads bytes as a plain read does, queueing any descriptors that
// came with them (received close-on-exec): regular files only, at most
// maxQueuedFiles; the others are closed at once (see closeUntrusted).
func (r *FileReader) Read(p []byte) (int, error) {
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, r.oob)
	if oobn > 0 {
		r.keep(r.oob[:oobn])
	}
	if n < 0 {
		n = 0
	}
	if n == 0 && err == nil && len(p) > 0 {
		err = io.EOF // recvmsg says nothing else at the end of a stream
	}
	return n, err
}

func (r *FileReader) keep(oob []byte) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			var st syscall.Stat_t
			if len(r.queued) >= maxQueuedFiles || syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
				closeUntrusted(fd, 0)
				continue
			}
			r.queued = append(r.queued, os.NewFile(uintptr(fd), "passed file"))
		}
	}
}

// closeUntrusted closes fd, a descriptor a hostile peer passed, without
// waiting on it. A close waits in two ways here: a TCP socket with unsent
// data and SO_LINGER set lingers (whatever O_NONBLOCK says), and a Unix
// socket's close releases the descriptors queued on it, with the same
// effect. So a socket is told to reset on its close (SO_LINGER 0), and a
// Unix socket's queue is read out first, its descriptors closed the same
// way, a few levels deep at most (beyond, the last ones are kept open:
// a leak the peer pays for with its connection, not a thread).
func closeUntrusted(fd, depth int) {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK {
		syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
		if dom, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_DOMAIN); err == nil && dom == syscall.AF_UNIX {
			if depth >= 3 {
				return
			}
			buf, oob := make([]byte, 4096), make([]byte, syscall.CmsgSpace(scmMaxFD*4))
			for range 1024 {
				n, oobn, _, _, err := syscall.Recvmsg(fd, buf, oob, syscall.MSG_DONTWAIT|syscall.MSG_CMSG_CLOEXEC)
				if err != nil || n == 0 && oobn == 0 {
					break
				}
				msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
				for _, m := range msgs {
					inner, _ := syscall.ParseUnixRights(&m)
					for _, ifd := range inner {
						closeUntrusted(ifd, depth+1)
					}
				}
			}
		}
	}
	syscall.Close(fd)
}

// take returns the oldest queued descriptor, or nil.
func (r *FileReader) take() *os.File {
	if len(r.queued) == 0 {
		return nil
	}
	f := r.queued[0]
	r.queued = r.queued[1:]
	return f
}

// Close closes the descriptors still queued.
func (r *FileReader) Close() {
	for _, f := range r.queued {
		f.Close()
	}
	r.queued = nil
}

// ErrNoFile: a frame said it carries a descriptor, and none came with it.
var ErrNoFile = errors.New("the frame declares a file descriptor that did not come with it")

// WriteFile sends one frame with f's descriptor attached to its first
// byte (h.File is set). The connection must be a Unix socket.
func (fw *FrameWriter) WriteFile(h *Header, f *os.File) error {
	uc, ok := fw.w.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("passing a file needs a Unix socket, not %T", fw.w)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	h.File = true
	var err error
	if fw.buf, err = AppendFrame(fw.buf[:0], h, 0); err != nil {
		return err
	}
	n, _, err := uc.WriteMsgUnix(fw.buf, syscall.UnixRights(int(f.Fd())), nil)
	if err == nil && n < len(fw.buf) {
		_, err = uc.Write(fw.buf[n:]) // the descriptor went with the first part
	}
	return err
}
