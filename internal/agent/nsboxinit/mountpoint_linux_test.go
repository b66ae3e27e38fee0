package nsboxinit

import (
	"os"
	"path/filepath"
	"testing"
)

// A mount point the neuron made a link (or a file) in its root is never
// followed: PID 1, the host user's own uid, would otherwise make
// directories — and mount — wherever the link pointed.
func TestMountPointNeverFollowsALink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(root, "proc"))
	os.Symlink(outside, filepath.Join(root, "usr"))
	os.WriteFile(filepath.Join(root, "tmp"), []byte("a file"), 0o644)
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	os.Symlink(filepath.Join(outside, "null"), filepath.Join(root, "dev", "null"))
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, f) }
	for _, tc := range []struct {
		rel  string
		file bool
	}{{"proc", false}, {"usr/local", false}, {"tmp", false}, {"dev/null", true}, {"run/nsys-cortex", false}} {
		f, err := mountPoint(root, tc.rel, tc.file, logf)
		if err != nil {
			t.Fatalf("%s: %v", tc.rel, err)
		}
		f.Close()
		st, err := os.Lstat(filepath.Join(root, tc.rel))
		if err != nil || st.Mode()&os.ModeSymlink != 0 || st.IsDir() == tc.file {
			t.Errorf("%s is %v %v after mountPoint", tc.rel, st.Mode(), err)
		}
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Fatalf("mountPoint made %v outside the root", names)
	}
	if len(logged) != 4 {
		t.Errorf("%d replacements logged, want 4 (proc, usr, tmp, dev/null)", len(logged))
	}
	for _, bad := range []string{"../x", "a/../../x"} {
		if f, err := mountPoint(root, bad, false, nil); err == nil {
			f.Close()
			t.Errorf("%s was accepted", bad)
		}
	}
}
