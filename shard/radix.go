package shard

// sortKeys sorts keys ascending, stably, moving vals (nil, or as long as
// keys) with them: an LSD radix sort over 16-bit digits that skips the
// digits every key shares, so keys of two indices below 2^11 take two
// passes. It allocates one scratch copy of keys (and vals).
func sortKeys(keys []uint64, vals []float64) {
	if len(keys) < 2 {
		return
	}
	var varying uint64
	for _, k := range keys[1:] {
		varying |= k ^ keys[0]
	}
	if varying == 0 {
		return
	}
	src, dst := keys, make([]uint64, len(keys))
	var vsrc, vdst []float64
	if vals != nil {
		vsrc, vdst = vals, make([]float64, len(vals))
	}
	var count [1 << 16]int
	for shift := uint(0); shift < 64; shift += 16 {
		if (varying>>shift)&0xffff == 0 {
			continue
		}
		clear(count[:])
		for _, k := range src {
			count[(k>>shift)&0xffff]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for q, k := range src {
			d := (k >> shift) & 0xffff
			p := count[d]
			count[d]++
			dst[p] = k
			if vsrc != nil {
				vdst[p] = vsrc[q]
			}
		}
		src, dst = dst, src
		vsrc, vdst = vdst, vsrc
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
		if vals != nil {
			copy(vals, vsrc)
		}
	}
}
