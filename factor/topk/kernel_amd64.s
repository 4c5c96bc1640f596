//go:build amd64 && !purego

#include "textflag.h"

// func dots32AVX2(out, w, rows *float32, nrows, stride int) float32
//
// For each group of eight rows (rows r..r+7, stride floats apart): eight
// accumulators, one per row, each lane c mod 8 a chain of VFMADD231PS
// over the row's chunks of eight floats; then the eight accumulators are
// reduced by VHADDPS (pairs of lanes) and one VPERM2F128 + VADDPS (the two
// 128-bit halves), giving the eight rows' sums in one register, stored to
// out. The order of the float32 operations is fixed but matters to no
// caller: the shadow scan bounds the error of any order (shadow.go).
// Y9 keeps the lane-wise maximum of the groups' sums (all >= 0, so it
// starts at 0), reduced at the end to the block's largest sum, returned.
TEXT ·dots32AVX2(SB), NOSPLIT, $0-44
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), R11
	MOVQ rows+16(FP), SI
	MOVQ nrows+24(FP), R9
	MOVQ stride+32(FP), R13
	SHRQ $3, R9          // groups of eight rows
	SHRQ $3, R13         // chunks of eight floats per row
	MOVQ stride+32(FP), DX
	SHLQ $2, DX          // DX: bytes per row
	LEAQ (DX)(DX*2), BX  // BX: 3 rows
	LEAQ (BX)(DX*4), R12 // R12: 7 rows
	VXORPS Y9, Y9, Y9    // the running maximum

group:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	LEAQ (SI)(DX*4), R8 // rows 4..7
	MOVQ R11, R10
	MOVQ R13, CX

chunk:
	VMOVUPS     (R10), Y8
	VFMADD231PS (SI), Y8, Y0
	VFMADD231PS (SI)(DX*1), Y8, Y1
	VFMADD231PS (SI)(DX*2), Y8, Y2
	VFMADD231PS (SI)(BX*1), Y8, Y3
	VFMADD231PS (R8), Y8, Y4
	VFMADD231PS (R8)(DX*1), Y8, Y5
	VFMADD231PS (R8)(DX*2), Y8, Y6
	VFMADD231PS (R8)(BX*1), Y8, Y7
	ADDQ        $32, SI
	ADDQ        $32, R8
	ADDQ        $32, R10
	DECQ        CX
	JNZ         chunk

	// SI is one row past the group's start: move it to the next group.
	ADDQ R12, SI

	// Y0 = [r0 01, r0 23, r1 01, r1 23 | r0 45, r0 67, r1 45, r1 67], …
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	// Y0 = [r0 0123, r1, r2, r3 | r0 4567, r1, r2, r3], Y4 the same of r4..r7
	VHADDPS Y2, Y0, Y0
	VHADDPS Y6, Y4, Y4
	// [low halves of Y0 and Y4] + [high halves]: r0..r7
	VPERM2F128 $0x20, Y4, Y0, Y1
	VPERM2F128 $0x31, Y4, Y0, Y3
	VADDPS     Y3, Y1, Y1
	VMOVUPS    Y1, (DI)
	VMAXPS     Y1, Y9, Y9
	ADDQ       $32, DI
	DECQ       R9
	JNZ        group

	// The largest of Y9's eight lanes.
	VEXTRACTF128 $1, Y9, X10
	VMAXPS       X10, X9, X9
	VPERMILPS    $0x4E, X9, X10
	VMAXPS       X10, X9, X9
	VPERMILPS    $0xB1, X9, X10
	VMAXPS       X10, X9, X9
	VZEROUPPER
	MOVSS        X9, ret+40(FP)
	RET

// func dots8AVX2(out *float32, w *int16, codes *uint8, scales *float32, unit, h float32, nrows, stride int) float32
//
// The 8-bit shadow's kernel: for each group of eight rows (rows r..r+7,
// stride bytes apart, codes 0..255), eight accumulators of eight int32
// lanes, one per row: each chunk of sixteen codes widened to int16
// (VPMOVZXBW), multiplied by the sixteen int16 weights and added in pairs
// (VPMADDWD), added to the row's lanes (VPADDD): exact integer sums (the
// caller keeps them below 2^31). The accumulators are then reduced as in
// dots32AVX2 (VPHADDD, VPERM2I128) to the eight rows' sums A_r in one
// register, and out[r] = (float32(A_r)·unit + h)·scales[r] in float32. Y9
// keeps the lane-wise maximum (all >= 0, so it starts at 0), reduced at
// the end to the largest out[r], returned.
TEXT ·dots8AVX2(SB), NOSPLIT, $0-60
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), R11
	MOVQ codes+16(FP), SI
	MOVQ scales+24(FP), R14
	VBROADCASTSS unit+32(FP), Y15
	VBROADCASTSS h+36(FP), Y10
	MOVQ nrows+40(FP), R9
	MOVQ stride+48(FP), DX // DX: bytes per row
	MOVQ DX, R13
	SHRQ $3, R9          // groups of eight rows
	SHRQ $4, R13         // chunks of sixteen codes per row
	LEAQ (DX)(DX*2), BX  // BX: 3 rows
	LEAQ (BX)(DX*4), R12 // R12: 7 rows
	VXORPS Y9, Y9, Y9    // the running maximum

group8:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	LEAQ (SI)(DX*4), R8 // rows 4..7
	MOVQ R11, R10
	MOVQ R13, CX

chunk8:
	VMOVDQU   (R10), Y8
	VPMOVZXBW (SI), Y11
	VPMOVZXBW (SI)(DX*1), Y12
	VPMOVZXBW (SI)(DX*2), Y13
	VPMOVZXBW (SI)(BX*1), Y14
	VPMADDWD  Y8, Y11, Y11
	VPMADDWD  Y8, Y12, Y12
	VPMADDWD  Y8, Y13, Y13
	VPMADDWD  Y8, Y14, Y14
	VPADDD    Y11, Y0, Y0
	VPADDD    Y12, Y1, Y1
	VPADDD    Y13, Y2, Y2
	VPADDD    Y14, Y3, Y3
	VPMOVZXBW (R8), Y11
	VPMOVZXBW (R8)(DX*1), Y12
	VPMOVZXBW (R8)(DX*2), Y13
	VPMOVZXBW (R8)(BX*1), Y14
	VPMADDWD  Y8, Y11, Y11
	VPMADDWD  Y8, Y12, Y12
	VPMADDWD  Y8, Y13, Y13
	VPMADDWD  Y8, Y14, Y14
	VPADDD    Y11, Y4, Y4
	VPADDD    Y12, Y5, Y5
	VPADDD    Y13, Y6, Y6
	VPADDD    Y14, Y7, Y7
	ADDQ      $16, SI
	ADDQ      $16, R8
	ADDQ      $32, R10
	DECQ      CX
	JNZ       chunk8

	// SI is one row past the group's start: move it to the next group.
	ADDQ R12, SI

	VPHADDD    Y1, Y0, Y0
	VPHADDD    Y3, Y2, Y2
	VPHADDD    Y5, Y4, Y4
	VPHADDD    Y7, Y6, Y6
	VPHADDD    Y2, Y0, Y0
	VPHADDD    Y6, Y4, Y4
	VPERM2I128 $0x20, Y4, Y0, Y1
	VPERM2I128 $0x31, Y4, Y0, Y3
	VPADDD     Y3, Y1, Y1
	// (A·unit + h)·scale
	VCVTDQ2PS  Y1, Y1
	VMULPS     Y15, Y1, Y1
	VADDPS     Y10, Y1, Y1
	VMULPS     (R14), Y1, Y1
	VMOVUPS    Y1, (DI)
	VMAXPS     Y1, Y9, Y9
	ADDQ       $32, DI
	ADDQ       $32, R14
	DECQ       R9
	JNZ        group8

	VEXTRACTF128 $1, Y9, X10
	VMAXPS       X10, X9, X9
	VPERMILPS    $0x4E, X9, X10
	VMAXPS       X10, X9, X9
	VPERMILPS    $0xB1, X9, X10
	VMAXPS       X10, X9, X9
	VZEROUPPER
	MOVSS        X9, ret+56(FP)
	RET
