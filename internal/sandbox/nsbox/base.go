package nsbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/store"
)

// baseVersion changes whenever the base root's recipe does, so an old base
// is rebuilt.
const baseVersion = "1"

// etcSubset is what of the host's /etc a neuron sees: what programs need
// to run, nothing that holds a secret (no shadow, ssh, sudoers, ...).
var etcSubset = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version",
	"environment", "gai.conf", "host.conf", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"locale.alias", "localtime", "login.defs", "lsb-release", "magic", "magic.mime", "mime.types",
	"networks", "nsswitch.conf", "os-release", "perl", "profile", "profile.d", "protocols",
	"python3", "python3.11", "python3.12", "resolv.conf", "services", "shells", "ssl", "timezone",
	"vim", "xdg", "gitconfig", "mailcap",
}

// rootLinks are top-level directories that merged-/usr systems make symlinks.
var rootLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostTrees lists the host directories a neuron sees (read-only, under its
// own overlay): /usr, and any of rootLinks that is a real directory here.
func hostTrees() []string {
	out := []string{"/usr"}
	for _, d := range rootLinks {
		if st, err := os.Lstat("/" + d); err == nil && st.IsDir() {
			out = append(out, "/"+d)
		}
	}
	return out
}

// ensureBase returns the shared base root, building it on first use: the
// top-level skeleton, the host's /etc subset, and passwd/group with the
// agent user. It never holds the host's /usr (that is mounted).
func ensureBase(lay layout.Layout) (string, error) {
	dir := filepath.Join(lay.ImagesDir(), "nsbox-base")
	marker := filepath.Join(dir, ".nsys-cortex-base")
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == baseVersion {
		return dir, nil
	}
	if err := os.MkdirAll(lay.ImagesDir(), 0o755); err != nil {
		return "", err
	}
	lock := store.NewLock(dir + ".lock")
	for i := 0; ; i++ {
		ok, err := lock.TryExclusive()
		if err != nil {
			return "", err
		}
		if ok {
			break
		}
		if i > 3000 {
			return "", errors.New("another process keeps building the base root")
		}
		waitTick()
	}
	defer lock.Release()
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == baseVersion {
		return dir, nil // built meanwhile
	}
	tmp, err := os.MkdirTemp(lay.ImagesDir(), ".nsbox-base-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := buildBase(tmp); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".nsys-cortex-base"), []byte(baseVersion+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	old := dir + ".old"
	os.RemoveAll(old)
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	// Neurons still running on the old base keep it open; it goes with them.
	os.RemoveAll(old)
	return dir, nil
}

func buildBase(root string) error {
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", "mnt", "opt", "srv", "home", "usr",
		"var/tmp", "var/lib", "var/cache", "var/log", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(root, "root"), 0o700); err != nil {
		return err
	}
	for _, d := range rootLinks {
		st, err := os.Lstat("/" + d)
		switch {
		case err != nil:
			continue
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink("/" + d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				return err
			}
		case st.IsDir():
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
	}
	etc := filepath.Join(root, "etc")
	for _, name := range etcSubset {
		if err := copyTree(filepath.Join("/etc", name), filepath.Join(etc, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("copying /etc/%s: %w", name, err)
		}
	}
	sh := "/bin/sh"
	if _, err := os.Stat("/usr/bin/bash"); err == nil {
		sh = "/bin/bash"
	}
	files := map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nagent:x:%d:%d:agent:%s:%s\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			AgentUID, AgentGID, AgentHome, sh),
		"group":    fmt.Sprintf("root:x:0:\nagent:x:%d:\nnogroup:x:65534:\n", AgentGID),
		"hostname": "neuron\n",
		"hosts":    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeNeuronEtc gives a neuron its own /etc/hostname and /etc/hosts in
// its upper layer (the directory at root), by descriptor: nothing the
// neuron left there is followed.
func writeNeuronEtc(root, id string) error {
	r, err := hostfs.Open(root)
	if err != nil {
		return err
	}
	defer r.Close()
	etc, err := hostfs.MakeDirs(r, "etc", 0o755, nil)
	if err != nil {
		return fmt.Errorf("the neuron's /etc: %w", err)
	}
	defer etc.Close()
	for name, content := range boot.NsboxEtc(id) {
		if b, err := etc.ReadFile(name, 1<<16); err == nil && string(b) == content {
			continue // a neuron created again: nothing to do
		}
		if err := etc.WriteFile(name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies files, directories and symlinks (as links), skipping what
// cannot be read (a private key directory, say).
func copyTree(src, dst string) error {
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case st.IsDir():
		if strings.HasSuffix(src, "/private") {
			return nil // ssl/private: keys are not for neurons
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return nil // unreadable: leave it out
		}
		if err := os.Mkdir(dst, st.Mode().Perm()|0o700); err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return os.Chmod(dst, st.Mode().Perm())
	case st.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return nil // unreadable: leave it out
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return nil // devices, sockets: not in /etc we hope; never copied
}
