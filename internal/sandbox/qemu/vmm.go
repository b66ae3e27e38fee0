package qemu

import (
	"fmt"
	"os"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
)

// identity is who QEMU runs as.
type identity struct {
	cred *syscall.Credential // nil: as this process
	why  string
}

func (i identity) String() string { return i.why }

// vmmIdentity: when this process is root, QEMU runs as the neuron's own
// unprivileged uid (lifecycle.AgentIdentity, as docker mode's containers
// do), so that a guest that escapes QEMU is nobody on the host. With KVM
// that uid must be let into /dev/kvm through its group; where /dev/kvm is
// root's alone, QEMU runs as root, and the log says so.
func vmmIdentity(lay layout.Layout, id string, kvm bool) (identity, error) {
	if os.Getuid() != 0 {
		return identity{why: fmt.Sprintf("as uid %d (this process's)", os.Getuid())}, nil
	}
	uid, gid, err := lifecycle.AgentIdentity(lay, id)
	if err != nil {
		return identity{}, err
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if kvm {
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/kvm", &st); err != nil || st.Mode&0o060 != 0o060 || st.Gid == 0 {
			return identity{why: "as root: /dev/kvm is open to root only (give it a group with rw for an unprivileged VMM)"}, nil
		}
		cred.Groups = []uint32{st.Gid}
	}
	return identity{cred: cred, why: fmt.Sprintf("as uid %d", uid)}, nil
}

// openDisks opens the files QEMU reads and writes and points spec at
// them (/proc/self/fd/N in QEMU, from fd on), giving the neuron's own
// disks to QEMU's uid. The boot files are world-readable.
func openDisks(spec *Spec, id identity, fd int) ([]*os.File, error) {
	if id.cred != nil {
		for _, p := range []string{spec.OverlayDisk, spec.ConfigDisk} {
			if err := os.Chown(p, int(id.cred.Uid), int(id.cred.Gid)); err != nil {
				return nil, fmt.Errorf("giving %s to QEMU's uid: %w", p, err)
			}
		}
	}
	var files []*os.File
	for _, f := range []struct {
		path *string
		flag int
	}{{&spec.Kernel, os.O_RDONLY}, {&spec.Initramfs, os.O_RDONLY}, {&spec.RootDisk, os.O_RDONLY},
		{&spec.OverlayDisk, os.O_RDWR}, {&spec.ConfigDisk, os.O_RDONLY}} {
		file, err := os.OpenFile(*f.path, f.flag, 0)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		*f.path = fmt.Sprintf("/proc/self/fd/%d", fd+len(files))
		files = append(files, file)
	}
	return files, nil
}

// qemuEnv is QEMU's environment: nothing of the operator's, only the
// neuron's mark (QEMU starts no process: its sandbox denies it).
func qemuEnv(id string) []string {
	return []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "NSYS_CORTEX_NEURON=" + id}
}

// listenAll makes QEMU's listening sockets in dir: the ports, the control
// port, QMP (in that order, as Start numbers them).
func listenAll(dir string) ([]*os.File, error) {
	paths := make([]string, 0, Ports+2)
	for i := 0; i < Ports; i++ {
		paths = append(paths, portSocket(dir, i))
	}
	paths = append(paths, ctlSocket(dir), qmpSocket(dir))
	var files []*os.File
	for _, p := range paths {
		os.Remove(p)
		ln, err := protocol.ListenUnix(p)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("channel: %w", err)
		}
		f, err := ln.File()
		ln.SetUnlinkOnClose(false) // QEMU listens on it from now on
		ln.Close()
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
