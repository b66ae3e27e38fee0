package vmimage

import "encoding/binary"

// bcjX86Decode undoes XZ's BCJ x86 filter in place: the encoder turned the
// relative targets of CALL (E8) and JMP (E9) into absolute ones so they
// compress better; this turns them back. buf is the whole filtered data,
// start the filter's start offset. It follows xz-embedded's xz_dec_bcj.c
// (public domain), run over the whole buffer at once; like it, the last
// four bytes are never converted.
func bcjX86Decode(buf []byte, start uint32) {
	maskToAllowed := [8]bool{true, true, true, false, true, false, false, false}
	maskToBitNum := [8]uint32{0, 1, 2, 2, 3, 3, 3, 3}
	msByte := func(b byte) bool { return b == 0x00 || b == 0xFF }
	if len(buf) <= 4 {
		return
	}
	size := len(buf) - 4
	prevPos := -1
	var prevMask uint32
	for i := 0; i < size; i++ {
		if buf[i]&0xFE != 0xE8 {
			continue
		}
		d := i - prevPos
		if d > 3 {
			prevMask = 0
		} else {
			prevMask = (prevMask << (d - 1)) & 7
			if prevMask != 0 {
				b := buf[i+4-int(maskToBitNum[prevMask])]
				if !maskToAllowed[prevMask] || msByte(b) {
					prevPos = i
					prevMask = prevMask<<1 | 1
					continue
				}
			}
		}
		prevPos = i
		if !msByte(buf[i+4]) {
			prevMask = prevMask<<1 | 1
			continue
		}
		src := binary.LittleEndian.Uint32(buf[i+1:])
		var dest uint32
		for {
			dest = src - (start + uint32(i) + 5)
			if prevMask == 0 {
				break
			}
			j := maskToBitNum[prevMask] * 8
			if !msByte(byte(dest >> (24 - j))) {
				break
			}
			src = dest ^ (1<<(32-j) - 1)
		}
		dest &= 0x01FFFFFF
		dest |= 0 - (dest & 0x01000000)
		binary.LittleEndian.PutUint32(buf[i+1:], dest)
		i += 4
	}
}
