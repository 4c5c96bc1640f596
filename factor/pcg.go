package factor

import (
	"math/bits"
	"math/rand/v2"
)

// The constants of math/rand/v2's PCG step, state ← state·mul + inc mod
// 2^128 (src/math/rand/v2/pcg.go).
const (
	pcgMulHi = 2549297995355413924
	pcgMulLo = 4865540595714422341
	pcgIncHi = 6364136223846793005
	pcgIncLo = 1442695040888963407
)

// u128 is an unsigned 128-bit integer, arithmetic mod 2^128.
type u128 struct{ hi, lo uint64 }

func (a u128) mul(b u128) u128 {
	hi, lo := bits.Mul64(a.lo, b.lo)
	hi += a.hi*b.lo + a.lo*b.hi
	return u128{hi, lo}
}

func (a u128) add(b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}
}

// PCGAt returns the generator rand.NewPCG(seed1, seed2) is after steps
// calls of its Uint64: its next Uint64 is the (steps+1)-th value of the
// stream, so a rand.Rand on it draws what the stream's draws from that
// point would be (Float64, Uint64 and IntN of a power of two take one
// Uint64 each). The jump costs O(log steps) 128-bit products (Brown,
// "Random Number Generation with Arbitrary Strides", 1994): the state of
// a linear congruential generator after k steps is A_k·s + C_k with A_k =
// mul^k and C_k = inc·(mul^(k−1) + … + 1), both found by squaring. What
// lets a worker draw a split's holdout coins, or a block of the initial
// model, without the draws before it.
func PCGAt(seed1, seed2, steps uint64) *rand.PCG {
	accMul, accPlus := u128{0, 1}, u128{}
	curMul, curPlus := u128{pcgMulHi, pcgMulLo}, u128{pcgIncHi, pcgIncLo}
	for k := steps; k > 0; k >>= 1 {
		if k&1 != 0 {
			accMul = accMul.mul(curMul)
			accPlus = accPlus.mul(curMul).add(curPlus)
		}
		curPlus = curMul.add(u128{0, 1}).mul(curPlus)
		curMul = curMul.mul(curMul)
	}
	s := accMul.mul(u128{seed1, seed2}).add(accPlus)
	return rand.NewPCG(s.hi, s.lo)
}
