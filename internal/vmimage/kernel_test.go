package vmimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// requireHostKernel returns this machine's Debian kernel, or skips saying
// why (CI installs linux-image-amd64 and sets NSYS_CORTEX_REQUIRE_QEMU).
func requireHostKernel(t testing.TB) (image, modules string) {
	t.Helper()
	image, modules, err := HostKernel()
	if err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_QEMU") == "1" {
			t.Fatalf("%v", err)
		}
		t.Skipf("%v", err)
	}
	return image, modules
}

// hostVmlinux is the host kernel unpacked, once per test binary (slow
// under the race detector).
var hostVmlinux = sync.OnceValues(func() ([]byte, error) {
	path, _, err := HostKernel()
	if err != nil {
		return nil, err
	}
	img, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ExtractKernel(img)
})

func TestExtractKernelMatchesXZ(t *testing.T) {
	path, _ := requireHostKernel(t)
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := hostVmlinux()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, elfMagic) || out[4] != 2 || binary.LittleEndian.Uint16(out[18:]) != 62 {
		t.Fatalf("not a 64-bit x86 ELF: % x", out[:20])
	}
	// The xz tool (which knows BCJ itself) must unpack the same bytes.
	xz, err := exec.LookPath("xz")
	if err != nil {
		t.Logf("xz is not installed: the result is checked by its CRC only")
		return
	}
	setup := int(img[0x1f1])
	pm := (setup + 1) * 512
	off, n := int(binary.LittleEndian.Uint32(img[0x248:])), int(binary.LittleEndian.Uint32(img[0x24c:]))
	cmd := exec.Command(xz, "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(img[pm+off : pm+off+n])
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("xz -dc: %v", err)
	}
	if sha256.Sum256(out) != sha256.Sum256(want) {
		t.Fatalf("vmlinux differs from xz's (%d vs %d bytes)", len(out), len(want))
	}
}

func TestExtractKernelBadInput(t *testing.T) {
	for name, in := range map[string][]byte{
		"empty":     nil,
		"text":      []byte("not a kernel at all, just some text that is long enough"),
		"truncated": append(make([]byte, 0x202), []byte("HdrS")...),
	} {
		if _, err := ExtractKernel(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	elf := append([]byte{0x7F, 'E', 'L', 'F'}, make([]byte, 60)...)
	if out, err := ExtractKernel(elf); err != nil || !bytes.Equal(out, elf) {
		t.Errorf("an ELF file passes through: %v", err)
	}
}

func TestBCJRoundTripWithXZ(t *testing.T) {
	xz, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("xz is not installed")
	}
	// x86 code-like data: many E8/E9 with small targets.
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(i * 7)
		if i%9 == 0 {
			data[i] = 0xE8
		}
		if i%13 == 0 {
			data[i] = 0xFF
		}
	}
	for _, args := range [][]string{{"--x86", "--lzma2"}, {"--x86=start=4096", "--lzma2", "--check=crc64"}, {"--lzma2", "--check=sha256"}} {
		cmd := exec.Command(xz, append([]string{"-c", "--format=xz"}, args...)...)
		cmd.Stdin = bytes.NewReader(data)
		packed, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz %v: %v", args, err)
		}
		got, err := decodeXZ(packed)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%v: round trip differs", args)
		}
		// A flipped byte in the payload is caught.
		bad := bytes.Clone(packed)
		bad[len(bad)/2] ^= 0x55
		if _, err := decodeXZ(bad); err == nil {
			t.Fatalf("%v: corruption not detected", args)
		}
	}
}
