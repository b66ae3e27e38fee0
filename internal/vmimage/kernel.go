package vmimage

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

var elfMagic = []byte{0x7F, 'E', 'L', 'F'}

// ExtractKernel returns the ELF vmlinux inside a bzImage: the protected-mode
// payload the boot header points at, decompressed (XZ, as Debian builds
// it, or gzip). An image that already is an ELF file is returned as it is.
func ExtractKernel(img []byte) ([]byte, error) {
	if bytes.HasPrefix(img, elfMagic) {
		return img, nil
	}
	// The x86 boot protocol (Documentation/arch/x86/boot.rst): the setup
	// header at 0x1f1, "HdrS" at 0x202, payload_offset/length (2.08+) at
	// 0x248/0x24c, counted from the protected-mode code after the setup
	// sectors.
	if len(img) < 0x250 || string(img[0x202:0x206]) != "HdrS" {
		return nil, errors.New("kernel: not a bzImage (no HdrS boot header) and not an ELF vmlinux")
	}
	if v := binary.LittleEndian.Uint16(img[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("kernel: boot protocol %d.%02d predates payload fields (2.08)", v>>8, v&0xFF)
	}
	setup := int(img[0x1f1])
	if setup == 0 {
		setup = 4
	}
	pm := (setup + 1) * 512
	off := int(binary.LittleEndian.Uint32(img[0x248:]))
	n := int(binary.LittleEndian.Uint32(img[0x24c:]))
	if pm+off+n > len(img) || n < 16 {
		return nil, fmt.Errorf("kernel: payload (%d bytes at %d) lies outside the %d-byte image", n, pm+off, len(img))
	}
	payload := img[pm+off : pm+off+n]
	var out []byte
	var err error
	switch {
	case bytes.HasPrefix(payload, xzMagic):
		out, err = decodeXZ(payload)
	case bytes.HasPrefix(payload, []byte{0x1F, 0x8B}):
		out, err = gunzip(payload)
	default:
		return nil, fmt.Errorf("kernel: payload compressed with %s: only XZ (Debian's) and gzip are supported", payloadFormat(payload))
	}
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	if !bytes.HasPrefix(out, elfMagic) {
		return nil, errors.New("kernel: the decompressed payload is not an ELF file")
	}
	return out, nil
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	zr.Multistream(false) // the kernel's appended size follows the stream
	return io.ReadAll(zr)
}

func payloadFormat(p []byte) string {
	switch {
	case bytes.HasPrefix(p, []byte{0x28, 0xB5, 0x2F, 0xFD}):
		return "zstd"
	case bytes.HasPrefix(p, []byte{0x02, 0x21, 0x4C, 0x18}):
		return "lz4"
	case bytes.HasPrefix(p, []byte("BZh")):
		return "bzip2"
	case bytes.HasPrefix(p, []byte{0x89, 'L', 'Z', 'O'}):
		return "lzo"
	case bytes.HasPrefix(p, []byte{0x5D, 0x00, 0x00}):
		return "lzma"
	}
	return fmt.Sprintf("an unknown format (% x)", p[:4])
}

// HostKernel finds the newest Debian kernel installed on this machine:
// /boot/vmlinuz-<version> with its modules in /lib/modules/<version>
// (apt-get install linux-image-amd64).
func HostKernel() (image, modules string, err error) {
	found, _ := filepath.Glob("/boot/vmlinuz-*")
	var usable []string
	for _, f := range found {
		v := strings.TrimPrefix(filepath.Base(f), "vmlinuz-")
		if _, err := os.Stat(filepath.Join("/lib/modules", v, "modules.dep")); err == nil {
			usable = append(usable, v)
		}
	}
	if len(usable) == 0 {
		return "", "", errors.New("no kernel with modules in /boot and /lib/modules: apt-get install linux-image-amd64")
	}
	sort.Slice(usable, func(i, j int) bool { return versionLess(usable[i], usable[j]) })
	v := usable[len(usable)-1]
	return "/boot/vmlinuz-" + v, filepath.Join("/lib/modules", v), nil
}

// versionLess orders kernel versions by their numeric fields.
func versionLess(a, b string) bool {
	fa, fb := strings.FieldsFunc(a, notDigit), strings.FieldsFunc(b, notDigit)
	for i := 0; i < len(fa) && i < len(fb); i++ {
		if len(fa[i]) != len(fb[i]) {
			return len(fa[i]) < len(fb[i])
		}
		if fa[i] != fb[i] {
			return fa[i] < fb[i]
		}
	}
	return len(fa) < len(fb)
}

func notDigit(r rune) bool { return r < '0' || r > '9' }
