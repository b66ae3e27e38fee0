package vmimage

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ulikunitz/xz"
)

// signed appends a module signature block as sign-file does.
func signed(module []byte, sig []byte) []byte {
	out := append(bytes.Clone(module), sig...)
	info := make([]byte, 12) // algo, hash, id_type, signer_len, key_id_len, pad[3], sig_len
	binary.BigEndian.PutUint32(info[8:], uint32(len(sig)))
	out = append(out, info...)
	return append(out, moduleSigMagic...)
}

func TestStripSignature(t *testing.T) {
	mod := append([]byte("\x7fELF"), bytes.Repeat([]byte{7}, 100)...)
	if got := StripSignature(signed(mod, bytes.Repeat([]byte{0xAA}, 300))); !bytes.Equal(got, mod) {
		t.Fatalf("stripped module is %d bytes, want %d", len(got), len(mod))
	}
	if got := StripSignature(mod); !bytes.Equal(got, mod) {
		t.Fatal("an unsigned module changed")
	}
}

// fakeModules makes a modules directory: modules.dep, modules.builtin,
// and the files (one .ko.xz, signed).
func fakeModules(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	dep := `kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/jbd2/jbd2.ko: kernel/lib/crc16.ko
kernel/fs/overlayfs/overlay.ko:
kernel/drivers/virtio/virtio-mmio.ko:
`
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/drivers/virtio/virtio.ko\n"), 0o644)
	for _, line := range strings.Split(strings.TrimSpace(dep), "\n") {
		path, _, _ := strings.Cut(line, ":")
		body := signed([]byte("\x7fELF module "+path), []byte("signature"))
		full := filepath.Join(dir, path)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if strings.HasSuffix(path, ".xz") {
			var b bytes.Buffer
			w, _ := xz.NewWriter(&b)
			w.Write(body)
			w.Close()
			body = b.Bytes()
		}
		if err := os.WriteFile(full, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestResolveAndPrepareModules(t *testing.T) {
	dir := fakeModules(t)
	mods, err := ResolveModules(dir, []string{"ext4", "virtio", "overlay", "virtio-mmio"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	// Dependencies first, each once; the built-in virtio is not a file.
	if want := []string{"crc16", "jbd2", "ext4", "overlay", "virtio_mmio"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("order %v, want %v", names, want)
	}
	if _, err := ResolveModules(dir, []string{"nosuch"}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("an unknown module: %v", err)
	}
	out := t.TempDir()
	files, err := PrepareModules(dir, mods, out)
	if err != nil {
		t.Fatal(err)
	}
	if files[2] != "02-ext4.ko" {
		t.Fatalf("files: %v", files)
	}
	b, err := os.ReadFile(filepath.Join(out, "02-ext4.ko"))
	if err != nil || string(b) != "\x7fELF module kernel/fs/ext4/ext4.ko.xz" {
		t.Fatalf("ext4 prepared as %q (%v): want it decompressed and unsigned", b, err)
	}
}
