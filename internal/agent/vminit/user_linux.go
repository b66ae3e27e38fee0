package vminit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// prepareUser makes the workdir and the home the agent's, as the user it
// runs as: the unprivileged boot.VMAgentUID, named in the guest's passwd and
// group files, or root with boot.VMConfig.Root.
func (g *guest) prepareUser() error {
	uid, gid := boot.VMAgentUID, boot.VMAgentGID
	if g.cfg.Root {
		uid, gid = 0, 0
	} else if err := ensureUser(); err != nil {
		return err
	}
	dirs := []string{g.cfg.Workdir}
	if home := envValue(g.cfg.Env, "HOME"); home != "" {
		dirs = append([]string{home}, dirs...)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
		if err := adopt(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// ensureUser adds the agent's user and group to /etc/passwd and
// /etc/group where the image lacks them.
func ensureUser() error {
	lines := map[string]string{
		"/etc/passwd": fmt.Sprintf("%s:x:%d:%d:Cortex agent:%s:/bin/sh", boot.VMAgentUser, boot.VMAgentUID, boot.VMAgentGID, boot.VMAgentHome),
		"/etc/group":  fmt.Sprintf("%s:x:%d:", boot.VMAgentUser, boot.VMAgentGID),
	}
	for file, line := range lines {
		has, err := hasEntry(file, boot.VMAgentUser)
		if err != nil {
			return err
		}
		if has {
			continue
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return fmt.Errorf("adding the agent's user to %s: %w", file, err)
		}
		_, err = fmt.Fprintln(f, line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("adding the agent's user to %s: %w", file, err)
		}
	}
	return nil
}

func hasEntry(file, name string) (bool, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name+":") {
			return true, nil
		}
	}
	return false, sc.Err()
}

// adopt gives directory d to uid:gid. A tree that belongs to someone else
// (a neuron whose commands ran as root before) is given over whole, once:
// without following a link, staying on its filesystem, and leaving alone
// any file with more than one link (a hard link to a file of root's that
// root commands once made stays root's).
func adopt(d string, uid, gid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(d, &st); err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	if int(st.Uid) == uid {
		return nil
	}
	dev := st.Dev
	return filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile: nothing to give
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil
		}
		if st.Dev != dev {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.IsDir() && st.Nlink > 1 {
			return nil
		}
		if err := unix.Lchown(p, uid, gid); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("giving %s to uid %d: %w", p, uid, err)
		}
		return nil
	})
}
