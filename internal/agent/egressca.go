package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/egressca"
)

// writeEgressCA writes the authority pem, and a bundle of this system's
// roots and it, where the neuron's programs are pointed at them
// (boot.EgressCAEnv): into dir, boot.EgressCADir in a pod (an empty
// directory of its own). The files are the neuron's as much as the
// agent's (one uid in a pod): what it could change there is only whom
// it trusts itself.
func writeEgressCA(dir string, pem []byte) error {
	if _, err := egressca.ParseCert(pem); err != nil {
		return fmt.Errorf("%s: %w", boot.EnvEgressCA, err)
	}
	write := func(name string, b []byte) error {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("the egress authority: %s: %w", filepath.Join(dir, name), err)
		}
		f := os.NewFile(uintptr(fd), name)
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if err := write(filepath.Base(boot.EgressCAFile), pem); err != nil {
		return err
	}
	return write(filepath.Base(boot.EgressCABundle), append(confine.HostBundle(), pem...))
}
