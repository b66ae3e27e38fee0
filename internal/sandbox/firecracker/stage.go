package firecracker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// jail is one neuron's chroot: dir is the jailer's directory, root the
// chroot inside it, uid and gid who Firecracker runs as there.
type jail struct {
	dir, root string
	uid, gid  int
}

func newJail(base, execFile, jailID string, uid, gid int) jail {
	d := jailDir(base, execFile, jailID)
	return jail{dir: d, root: filepath.Join(d, "root"), uid: uid, gid: gid}
}

// host maps a path inside the jail to the host.
func (j jail) host(p string) string { return filepath.Join(j.root, filepath.Clean("/"+p)) }

// markerFile, in the jail's directory (outside the chroot), names the
// neuron and home a jail belongs to.
const markerFile = "nsys-cortex.json"

type marker struct {
	Neuron string    `json:"neuron"`
	Home   string    `json:"home"`
	Made   time.Time `json:"made"`
}

// prepare makes an empty chroot owned by the jail user, with the
// Firecracker log and metrics files it will write.
func (j jail) prepare(neuron, home string) error {
	if err := os.RemoveAll(j.dir); err != nil { // a jail left by a VM that is gone
		return fmt.Errorf("clearing the old jail %s: %w", j.dir, err)
	}
	if err := mkdirRace(j.root); err != nil {
		return err
	}
	if err := store.WriteJSON(filepath.Join(j.dir, markerFile), marker{Neuron: neuron, Home: home, Made: time.Now().UTC()}, 0o600); err != nil {
		return err
	}
	if err := os.Lchown(j.root, j.uid, j.gid); err != nil {
		return fmt.Errorf("giving the jail to uid %d: %w", j.uid, err)
	}
	for _, p := range []string{jailLog, jailMetrics} {
		if err := j.ownedFile(p, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// mkdirRace is os.MkdirAll(dir, 0o700), tried again where a Released of
// another neuron removed an empty parent between the making of it and of
// its child.
func mkdirRace(dir string) error {
	err := os.MkdirAll(dir, 0o700)
	for i := 0; i < 3 && errors.Is(err, fs.ErrNotExist); i++ {
		err = os.MkdirAll(dir, 0o700)
	}
	return err
}

// ownedFile creates an empty file in the jail, owned by the jail user.
func (j jail) ownedFile(p string, mode os.FileMode) error {
	f, err := os.OpenFile(j.host(p), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	f.Close()
	return os.Lchown(j.host(p), j.uid, j.gid)
}

// linkShared puts a read-only input the jail user may read but never
// change (kernel, initrd, root disk) at p. A world-readable file that only
// its owner may write is hard-linked (nothing is copied, and the jail user,
// not being its owner, cannot chmod it); anything else, or a file on
// another filesystem, is copied and given to the jail user read-only.
func (j jail) linkShared(src, p string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	dst := j.host(p)
	owner := st.Sys().(*syscall.Stat_t).Uid
	if st.Mode().Perm()&0o044 == 0o044 && st.Mode().Perm()&0o022 == 0 && int(owner) != j.uid {
		if err := os.Link(src, dst); err == nil {
			return nil
		} else if !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) {
			return err
		}
	}
	if err := sparseCopy(src, dst); err != nil {
		return fmt.Errorf("copying %s into the jail: %w", src, err)
	}
	if err := os.Chmod(dst, 0o400); err != nil {
		return err
	}
	return os.Lchown(dst, j.uid, j.gid)
}

// linkReadable hard-links a file the VM reads but must not change (a
// snapshot's memory) as root:<jail gid> 0440: readable through the
// group, not writable, and not the jail user's to chmod.
func (j jail) linkReadable(src, p string) error {
	if err := os.Lchown(src, 0, j.gid); err != nil {
		return err
	}
	if err := os.Chmod(src, 0o440); err != nil {
		return err
	}
	if err := os.Link(src, j.host(p)); err != nil {
		if !errors.Is(err, syscall.EXDEV) {
			return err
		}
		if err := sparseCopy(src, j.host(p)); err != nil {
			return err
		}
		return os.Lchown(j.host(p), 0, j.gid)
	}
	return nil
}

// linkOwned hard-links the neuron's own writable disk into the jail and
// gives it to the jail user. A copy would leave the neuron's data behind
// in the jail, so another filesystem is an error.
func (j jail) linkOwned(src, p string) error {
	if err := os.Lchown(src, j.uid, j.gid); err != nil {
		return err
	}
	if err := os.Chmod(src, 0o600); err != nil {
		return err
	}
	if err := os.Link(src, j.host(p)); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return fmt.Errorf("the overlay disk %s and the jails (%s) must be on one filesystem to hard-link it: set %s to a directory beside the overlays",
				src, filepath.Dir(filepath.Dir(j.dir)), EnvChroot)
		}
		return err
	}
	return nil
}

// remove deletes the jail. It never follows a symlink the jailed process
// may have made (RemoveAll unlinks them), and hard links only lose a name.
func (j jail) remove() error {
	return os.RemoveAll(j.dir)
}

// sparseCopy copies src to a new file dst, private (0600), which must not
// exist: vmimage.CopyInto, a reflink or the data extents alone.
func sparseCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := vmimage.CopyInto(out, in, st.Size()); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}

// copyAtomic copies src over dst through a temporary file beside dst.
func copyAtomic(src, dst string) error {
	tmp := dst + ".partial"
	os.Remove(tmp)
	if err := sparseCopy(src, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// moveOut moves a file the VM wrote in its jail to dst, owned by root and
// private: a rename where both are on one filesystem, a copy otherwise.
func moveOut(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		if !errors.Is(err, syscall.EXDEV) {
			return err
		}
		if err := sparseCopy(src, dst); err != nil {
			return err
		}
		os.Remove(src)
	}
	if err := os.Lchown(dst, 0, 0); err != nil && os.Geteuid() == 0 {
		return err
	}
	return os.Chmod(dst, 0o600)
}

// OverlayLabel is the ext4 label of a neuron's overlay disk.
const OverlayLabel = "cortex-overlay"
