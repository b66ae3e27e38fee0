// Package layout names the paths under the Cortex home directory
// (~/.nsys-cortex by default):
//
//	overlays/<id>/      a neuron's persistent data and its state file
//	sockets/[group/]<id>/  the channel directory of a neuron (0700)
//	snapshots/<id>/     snapshots of a neuron's overlay
//	mounts/             records of running /ctx mounts (nsys-cortex mount)
//	images/             neuron images; images/vm/ the microVM kernel and disks
//	sessions/ logs/ bin/ config.json
//
// It is a foundation package: standard library only, no I/O but lookups of
// the environment and the user's home.
package layout

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
)

// Environment variables that move the tree.
const (
	EnvHome         = "NSYS_CORTEX_HOME"
	EnvOverlayStore = "NSYS_CORTEX_OVERLAY_STORE_DIR"
)

// Layout is a resolved home tree.
type Layout struct {
	// Home is the root of the tree.
	Home string
	// Overlays holds one directory per neuron (NSYS_CORTEX_OVERLAY_STORE_DIR moves it).
	Overlays string
}

// FromEnv resolves the layout from the environment.
func FromEnv() (Layout, error) {
	home := os.Getenv(EnvHome)
	if home == "" {
		uh, err := os.UserHomeDir()
		if err != nil || uh == "" {
			return Layout{}, errors.New("cannot find the home directory: set NSYS_CORTEX_HOME")
		}
		home = filepath.Join(uh, ".nsys-cortex")
	}
	return New(home, os.Getenv(EnvOverlayStore))
}

// New returns the layout rooted at home, with overlays under overlayStore
// when that is not empty. Both are made absolute.
func New(home, overlayStore string) (Layout, error) {
	h, err := filepath.Abs(home)
	if err != nil {
		return Layout{}, err
	}
	l := Layout{Home: h, Overlays: filepath.Join(h, "overlays")}
	if overlayStore != "" {
		if l.Overlays, err = filepath.Abs(overlayStore); err != nil {
			return Layout{}, err
		}
	}
	return l, nil
}

// Tag is a short name of this home: eight hex digits, a hash of the
// overlay store's absolute path (where the neurons' data is, and so what
// tells one home's neuron from another's of the same id). Backends put it
// in the names of what they make outside the home, so that two homes on
// one host (two users, two test runs) never share or find each other's:
// container names and labels, jail ids, VMM process names, cgroups.
func (l Layout) Tag() string {
	abs, err := filepath.Abs(l.Overlays)
	if err != nil {
		abs = l.Overlays
	}
	h := fnv.New32a()
	h.Write([]byte(abs))
	return fmt.Sprintf("%08x", h.Sum32())
}

// OverlayDir is the persistent directory of neuron id.
func (l Layout) OverlayDir(id string) string { return filepath.Join(l.Overlays, id) }

// SocketsDir holds the channel directories.
func (l Layout) SocketsDir() string { return filepath.Join(l.Home, "sockets") }

// ChannelDir is the channel directory of neuron id in group: a directory
// of SocketsDir that keeps the ids of one group apart from another's (a
// backend names its group, usually its mode). An empty group is
// SocketsDir itself.
func (l Layout) ChannelDir(group, id string) string {
	return filepath.Join(l.SocketsDir(), group, id)
}

// SnapshotsDir holds the snapshots of neuron id.
func (l Layout) SnapshotsDir(id string) string { return filepath.Join(l.Home, "snapshots", id) }

// ImagesDir holds neuron images and root filesystems.
func (l Layout) ImagesDir() string { return filepath.Join(l.Home, "images") }

// VMImageDir holds the microVM image: kernel, initramfs, root disk.
func (l Layout) VMImageDir() string { return filepath.Join(l.ImagesDir(), "vm") }

// SessionsDir holds agent sessions.
func (l Layout) SessionsDir() string { return filepath.Join(l.Home, "sessions") }

// LogsDir holds logs.
func (l Layout) LogsDir() string { return filepath.Join(l.Home, "logs") }

// BinDir holds the unpacked agent binaries, by content hash.
func (l Layout) BinDir() string { return filepath.Join(l.Home, "bin") }

// TerminalLocksDir holds the hosts' writer locks of terminals, a
// directory per neuron (term.LockWriter); a wipe of the neuron removes its
// own.
func (l Layout) TerminalLocksDir() string { return filepath.Join(l.Home, "terminals") }

// MountsDir holds the records of running /ctx mounts.
func (l Layout) MountsDir() string { return filepath.Join(l.Home, "mounts") }

// ConfigFile is the configuration file.
func (l Layout) ConfigFile() string { return filepath.Join(l.Home, "config.json") }

// APITokenFile holds the token `serve` made for itself when none was
// configured (owner-only); local CLIs read it to reach that daemon.
func (l Layout) APITokenFile() string { return filepath.Join(l.Home, "api.token") }

// URLKeyFile holds the key that signs port URLs (nsys-cortex url):
// owner-only, made on first use, never in a neuron.
func (l Layout) URLKeyFile() string { return filepath.Join(l.Home, "url.key") }

// EventsDir holds the lifecycle event log (events.jsonl and its rotated
// files), which every host process appends to.
func (l Layout) EventsDir() string { return filepath.Join(l.LogsDir(), "events") }
