package vmimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// The XZ container (tukaani.org/xz/xz-file-format.txt) around a kernel's
// payload: one stream of one block, filtered with BCJ x86 then LZMA2
// (scripts/xz_wrap.sh). The xz module decodes LZMA2 but no BCJ filter, so
// the container is read here and BCJ undone by bcjX86Decode.

var xzMagic = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}

// XZ filter ids and check types.
const (
	xzFilterX86   = 0x04
	xzFilterLZMA2 = 0x21

	xzCheckNone   = 0x00
	xzCheckCRC32  = 0x01
	xzCheckCRC64  = 0x04
	xzCheckSHA256 = 0x0A
)

var crc64Table = crc64.MakeTable(crc64.ECMA)

// decodeXZ decompresses a single-block XZ stream (trailing bytes after the
// stream, like the kernel's appended size, are ignored) and checks it.
func decodeXZ(data []byte) ([]byte, error) {
	if len(data) < 24 || !bytes.Equal(data[:6], xzMagic) {
		return nil, errors.New("xz: not an XZ stream")
	}
	if data[6] != 0 || data[7]&0xF0 != 0 {
		return nil, errors.New("xz: unknown stream flags")
	}
	if crc32.ChecksumIEEE(data[6:8]) != binary.LittleEndian.Uint32(data[8:12]) {
		return nil, errors.New("xz: stream header is corrupt")
	}
	check := data[7] & 0x0F
	checkSize, err := xzCheckSize(check)
	if err != nil {
		return nil, err
	}
	blk, err := parseXZBlock(data[12:])
	if err != nil {
		return nil, err
	}
	if blk.compSize < 0 {
		if blk.compSize, err = xzIndexCompSize(data, blk.headerSize, checkSize); err != nil {
			return nil, err
		}
	}
	start := 12 + blk.headerSize
	end := start + int(blk.compSize)
	if blk.compSize <= 0 || end > len(data) {
		return nil, fmt.Errorf("xz: block of %d bytes runs past the %d bytes given", blk.compSize, len(data))
	}
	var out bytes.Buffer
	if blk.uncompSize > 0 && blk.uncompSize < 1<<31 {
		out.Grow(int(blk.uncompSize))
	}
	r, err := lzma.Reader2Config{DictCap: blk.dictCap}.NewReader2(bytes.NewReader(data[start:end]))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	if _, err := io.Copy(&out, r); err != nil {
		return nil, fmt.Errorf("xz: LZMA2 data: %w", err)
	}
	plain := out.Bytes()
	if blk.uncompSize >= 0 && int64(len(plain)) != blk.uncompSize {
		return nil, fmt.Errorf("xz: block holds %d bytes, its header says %d", len(plain), blk.uncompSize)
	}
	if blk.x86 {
		bcjX86Decode(plain, blk.x86Start)
	}
	sumAt := start + int(blk.compSize)
	sumAt += (4 - sumAt%4) % 4
	if sumAt+checkSize > len(data) {
		return nil, errors.New("xz: stream ends before the block's check")
	}
	if err := xzVerify(check, plain, data[sumAt:sumAt+checkSize]); err != nil {
		return nil, err
	}
	return plain, nil
}

func xzCheckSize(check byte) (int, error) {
	switch check {
	case xzCheckNone:
		return 0, nil
	case xzCheckCRC32:
		return 4, nil
	case xzCheckCRC64:
		return 8, nil
	case xzCheckSHA256:
		return 32, nil
	}
	return 0, fmt.Errorf("xz: unsupported check type %#x", check)
}

func xzVerify(check byte, plain, want []byte) error {
	var got []byte
	switch check {
	case xzCheckNone:
		return nil
	case xzCheckCRC32:
		got = binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(plain))
	case xzCheckCRC64:
		got = binary.LittleEndian.AppendUint64(nil, crc64.Checksum(plain, crc64Table))
	case xzCheckSHA256:
		s := sha256.Sum256(plain)
		got = s[:]
	}
	if !bytes.Equal(got, want) {
		return errors.New("xz: the decompressed data does not match its check (corrupt kernel image)")
	}
	return nil
}

type xzBlock struct {
	headerSize int
	compSize   int64 // -1: not in the header
	uncompSize int64 // -1: not in the header
	dictCap    int
	x86        bool
	x86Start   uint32
}

func parseXZBlock(b []byte) (*xzBlock, error) {
	if len(b) < 1 || b[0] == 0 {
		return nil, errors.New("xz: the stream holds no block")
	}
	hs := (int(b[0]) + 1) * 4
	if len(b) < hs {
		return nil, errors.New("xz: truncated block header")
	}
	h := b[:hs]
	if crc32.ChecksumIEEE(h[:hs-4]) != binary.LittleEndian.Uint32(h[hs-4:]) {
		return nil, errors.New("xz: block header is corrupt")
	}
	blk := &xzBlock{headerSize: hs, compSize: -1, uncompSize: -1}
	flags := h[1]
	if flags&0x3C != 0 {
		return nil, errors.New("xz: unknown block flags")
	}
	p := h[2 : hs-4]
	var err error
	if flags&0x40 != 0 {
		var v uint64
		if v, p, err = xzVarint(p); err != nil {
			return nil, err
		}
		blk.compSize = int64(v)
	}
	if flags&0x80 != 0 {
		var v uint64
		if v, p, err = xzVarint(p); err != nil {
			return nil, err
		}
		blk.uncompSize = int64(v)
	}
	n := int(flags&3) + 1
	for i := 0; i < n; i++ {
		var id, size uint64
		if id, p, err = xzVarint(p); err != nil {
			return nil, err
		}
		if size, p, err = xzVarint(p); err != nil {
			return nil, err
		}
		if uint64(len(p)) < size {
			return nil, errors.New("xz: truncated filter properties")
		}
		props := p[:size]
		p = p[size:]
		last := i == n-1
		switch {
		case id == xzFilterLZMA2 && last && size == 1:
			if blk.dictCap, err = lzma2DictCap(props[0]); err != nil {
				return nil, err
			}
		case id == xzFilterX86 && !last && (size == 0 || size == 4):
			blk.x86 = true
			if size == 4 {
				blk.x86Start = binary.LittleEndian.Uint32(props)
			}
		default:
			return nil, fmt.Errorf("xz: filter %#x (position %d of %d) is not supported: only BCJ x86 followed by LZMA2", id, i+1, n)
		}
	}
	return blk, nil
}

// lzma2DictCap decodes the LZMA2 dictionary-size property.
func lzma2DictCap(b byte) (int, error) {
	bits := int(b & 0x3F)
	if bits > 40 {
		return 0, errors.New("xz: bad LZMA2 dictionary size")
	}
	if bits == 40 {
		return 1<<32 - 1, nil
	}
	return (2 | bits&1) << (bits/2 + 11), nil
}

// xzVarint reads XZ's multibyte integer.
func xzVarint(b []byte) (uint64, []byte, error) {
	var v uint64
	for i := 0; i < len(b) && i < 9; i++ {
		v |= uint64(b[i]&0x7F) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, b[i+1:], nil
		}
	}
	return 0, nil, errors.New("xz: bad integer")
}

// xzIndexCompSize finds the one block's compressed size in the stream's
// index, found through its footer (at the end of data, or 4 bytes before
// it where the kernel's build appended the uncompressed size).
func xzIndexCompSize(data []byte, headerSize, checkSize int) (int64, error) {
	for _, end := range []int{len(data), len(data) - 4} {
		if end < 24 || !bytes.Equal(data[end-2:end], []byte("YZ")) {
			continue
		}
		foot := data[end-12 : end]
		if crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot[0:4]) {
			continue
		}
		isz := (int(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
		at := end - 12 - isz
		if at < 12 {
			continue
		}
		idx := data[at : end-12]
		if idx[0] != 0 {
			return 0, errors.New("xz: corrupt index")
		}
		count, p, err := xzVarint(idx[1:])
		if err != nil {
			return 0, err
		}
		if count != 1 {
			return 0, fmt.Errorf("xz: the stream has %d blocks; a kernel payload has one", count)
		}
		unpadded, _, err := xzVarint(p)
		if err != nil {
			return 0, err
		}
		return int64(unpadded) - int64(headerSize) - int64(checkSize), nil
	}
	return 0, errors.New("xz: no stream footer found")
}
