package factor

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPCGAtMatchesStepping: jumping k steps gives the generator that k
// calls of Uint64 leave (0, 1, 2^j ± 1, random k), and jumps compose.
func TestPCGAtMatchesStepping(t *testing.T) {
	steps := []uint64{0, 1, 2, 3}
	for j := 2; j <= 16; j++ {
		steps = append(steps, 1<<j-1, 1<<j, 1<<j+1)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for range 20 {
		steps = append(steps, rng.Uint64N(100000))
	}
	for _, seeds := range [][2]uint64{{0, 0}, {7, 0x686f6c64}, {1<<63 + 5, 1<<64 - 1}} {
		p := rand.NewPCG(seeds[0], seeds[1])
		at := uint64(0)
		for _, k := range slices.Sorted(slices.Values(steps)) {
			for ; at < k; at++ {
				p.Uint64()
			}
			q := PCGAt(seeds[0], seeds[1], k)
			for d := range 3 {
				pb, _ := p.MarshalBinary()
				qb, _ := q.MarshalBinary()
				if string(pb) != string(qb) {
					t.Fatalf("seeds %v, %d steps (+%d): jumped state %x, stepped %x", seeds, k, d, qb, pb)
				}
				p.Uint64()
				q.Uint64()
				at++
			}
			p = PCGAt(seeds[0], seeds[1], k) // back to k, from a jump this time
			at = k
		}
	}
	// Composition: a jump of a then of b is a jump of a + b, for
	// distances far beyond stepping (holdout draws of 10^12 rows).
	for range 20 {
		a, b := rng.Uint64()>>1, rng.Uint64()>>1
		x := PCGAt(3, 4, a)
		xb, _ := x.MarshalBinary()
		hi, lo := binary.BigEndian.Uint64(xb[4:]), binary.BigEndian.Uint64(xb[12:])
		y, z := PCGAt(hi, lo, b), PCGAt(3, 4, a+b)
		if y.Uint64() != z.Uint64() {
			t.Fatalf("jump %d then %d differs from jump %d", a, b, a+b)
		}
	}
	// A rand.Rand on the jumped generator draws the stream's Float64s.
	r := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		r.Float64()
	}
	if x, y := r.Float64(), rand.New(PCGAt(5, 6, 1000)).Float64(); x != y {
		t.Fatalf("Float64 after 1000 draws %v, from the jump %v", x, y)
	}
}
