package layout

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvHome, "")
	t.Setenv(EnvOverlayStore, "")
	t.Setenv("HOME", "/home/someone")
	l, err := FromEnv()
	if err != nil || l.Home != "/home/someone/.nsys-cortex" || l.Overlays != "/home/someone/.nsys-cortex/overlays" {
		t.Fatalf("%+v %v", l, err)
	}
	t.Setenv(EnvHome, "/srv/cortex")
	t.Setenv(EnvOverlayStore, "/data/overlays")
	l, err = FromEnv()
	if err != nil || l.Home != "/srv/cortex" || l.OverlayDir("n1") != "/data/overlays/n1" {
		t.Fatalf("%+v %v", l, err)
	}
	for got, want := range map[string]string{
		l.ChannelDir("", "n1"):       "/srv/cortex/sockets/n1",
		l.ChannelDir("docker", "n1"): "/srv/cortex/sockets/docker/n1",
		l.SnapshotsDir("n1"):         "/srv/cortex/snapshots/n1",
		l.LogsDir():                  "/srv/cortex/logs",
		l.BinDir():                   "/srv/cortex/bin",
		l.ConfigFile():               "/srv/cortex/config.json",
		l.ImagesDir():                "/srv/cortex/images",
		l.SessionsDir():              "/srv/cortex/sessions",
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
	// The tag is the overlay store's: docker's container names and
	// firecracker's jail ids of running neurons are made of it, so its
	// value must never change.
	if got := l.Tag(); got != "f612d3d6" {
		t.Errorf("tag of %s: %s", l.Overlays, got)
	}
	if other, _ := New("/srv/cortex", ""); other.Tag() == l.Tag() {
		t.Errorf("two overlay stores, one tag %s", l.Tag())
	}
	// Relative settings become absolute.
	t.Setenv(EnvHome, "rel/home")
	l, _ = FromEnv()
	if !filepath.IsAbs(l.Home) || !strings.HasSuffix(l.Home, "rel/home") {
		t.Fatalf("%q", l.Home)
	}
}
