package agent

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// statAt describes the entry name of the open directory d without following
// a symlink, relative to d's descriptor so no path is resolved twice.
func statAt(d *os.File, name string) (protocol.FileInfo, error) {
	var st unix.Stat_t
	fd := int(d.Fd())
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return protocol.FileInfo{}, err
	}
	fi := protocol.FileInfo{Name: name, Size: st.Size, Mode: st.Mode & 0o777,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fi.Type = protocol.TypeFile
	case unix.S_IFDIR:
		fi.Type = protocol.TypeDir
	case unix.S_IFLNK:
		fi.Type = protocol.TypeSymlink
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(fd, name, buf); err == nil {
			fi.Target = string(buf[:n])
		}
	default:
		fi.Type = protocol.TypeOther
	}
	return fi, nil
}
