//go:build amd64 && !purego

#include "textflag.h"

// func runAVX2(d, dh, kt, kh, t *float64, cols *int32, vals *float64, gs *float64, n, mbytes int)
//
// The kernel of Compute for one column of a block (see Compute, which
// passes row j of K as d and its K̂ row as dh, the block's rows of D as kt
// and of D̂ as kh): for q in [0, n), with j = cols[q], c = vals[q],
//
//	t     = d ⊙ kt[j]                  (VMULPD, no FMA)
//	gs[q]  = (Σ t_{l≡0} + Σ t_{l≡1}) + (Σ t_{l≡2} + Σ t_{l≡3})  (mod 4 lanes)
//	dh   += (c/gs[q])·t;  kh[j] += (c/gs[q])·t
//
// exactly the operations, in exactly the order, of prodSum and scatter,
// so results are bitwise those of the pure-Go path. mbytes = 8·m with m a
// multiple of 4. Rows of kt and kh 8 nonzeros ahead are prefetched.
// Multiplication and addition are commutative in IEEE arithmetic, so
// swapping the roles of the two factors leaves every bit unchanged.
TEXT ·runAVX2(SB), NOSPLIT, $0-80
	MOVQ d+0(FP), DI
	MOVQ dh+8(FP), SI
	MOVQ kt+16(FP), R8
	MOVQ kh+24(FP), R9
	MOVQ t+32(FP), R13
	MOVQ cols+40(FP), R10
	MOVQ vals+48(FP), R11
	MOVQ gs+56(FP), R12
	MOVQ n+64(FP), CX
	MOVQ mbytes+72(FP), DX
	TESTQ CX, CX
	JLE done

nonzero:
	CMPQ CX, $9
	JLT rows
	MOVLQSX 32(R10), AX
	IMULQ DX, AX
	LEAQ (R8)(AX*1), BX
	LEAQ (R9)(AX*1), R14
	MOVQ DX, AX
prefetch:
	PREFETCHT0 (BX)
	PREFETCHT0 (R14)
	ADDQ $64, BX
	ADDQ $64, R14
	SUBQ $64, AX
	JG prefetch

rows:
	MOVLQSX (R10), AX
	IMULQ DX, AX
	LEAQ (R8)(AX*1), BX
	LEAQ (R9)(AX*1), R14

	VXORPD Y0, Y0, Y0
	XORQ AX, AX
dot:
	VMOVUPD (DI)(AX*1), Y1
	VMULPD (BX)(AX*1), Y1, Y1
	VMOVUPD Y1, (R13)(AX*1)
	VADDPD Y1, Y0, Y0
	ADDQ $32, AX
	CMPQ AX, DX
	JLT dot

	VEXTRACTF128 $1, Y0, X2
	VHADDPD X0, X0, X0
	VHADDPD X2, X2, X2
	VADDSD X2, X0, X0
	VMOVSD X0, (R12)
	VMOVSD (R11), X1
	VDIVSD X0, X1, X1
	VBROADCASTSD X1, Y1

	XORQ AX, AX
scatter:
	VMULPD (R13)(AX*1), Y1, Y2
	VADDPD (SI)(AX*1), Y2, Y3
	VMOVUPD Y3, (SI)(AX*1)
	VADDPD (R14)(AX*1), Y2, Y4
	VMOVUPD Y4, (R14)(AX*1)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT scatter

	ADDQ $4, R10
	ADDQ $8, R11
	ADDQ $8, R12
	DECQ CX
	JNZ nonzero

done:
	VZEROUPPER
	RET

// func prefetchR(p *float64, bytes int)
//
// Hints the cache lines of [p, p+bytes) into L1 for reading (PREFETCHT0).
TEXT ·prefetchR(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ bytes+8(FP), CX
	MOVQ AX, DX
	ANDQ $63, DX
	ADDQ DX, CX
pr:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	SUBQ $64, CX
	JG pr
	RET

// func prefetchRW(r, w *float64, bytes int)
//
// Hints [r, r+bytes) for reading (PREFETCHT0) and [w, w+bytes) for
// writing (PREFETCHW, 0F 0D /1, which the Go assembler does not name;
// a CPU without it executes it as a NOP). The line count follows r's
// alignment within a line (the rows passed share it).
TEXT ·prefetchRW(SB), NOSPLIT, $0-24
	MOVQ r+0(FP), AX
	MOVQ w+8(FP), BX
	MOVQ bytes+16(FP), CX
	MOVQ AX, DX
	ANDQ $63, DX
	ADDQ DX, CX
prw:
	PREFETCHT0 (AX)
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B // PREFETCHW (BX)
	ADDQ $64, AX
	ADDQ $64, BX
	SUBQ $64, CX
	JG prw
	RET

// func prefetchW(w *float64, bytes int)
//
// Hints [w, w+bytes) for writing (PREFETCHW, see prefetchRW).
TEXT ·prefetchW(SB), NOSPLIT, $0-16
	MOVQ w+0(FP), BX
	MOVQ bytes+8(FP), CX
	MOVQ BX, DX
	ANDQ $63, DX
	ADDQ DX, CX
pw:
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B // PREFETCHW (BX)
	ADDQ $64, BX
	SUBQ $64, CX
	JG pw
	RET

// func prefetchR32(p *float32, bytes int)
//
// prefetchR for a row of the float32 copy of K^T.
TEXT ·prefetchR32(SB), NOSPLIT, $0-16
	JMP ·prefetchR(SB)

// func widenAVX2(dst *float64, src *float32, n int)
//
// dst[l] = float64(src[l]) for l in [0, n), n a positive multiple of 4
// (VCVTPS2PD: exact, as the conversion in Go is).
TEXT ·widenAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
widen:
	VCVTPS2PD (SI)(AX*4), Y0
	VMOVUPD Y0, (DI)(AX*8)
	ADDQ $4, AX
	CMPQ AX, CX
	JLT widen
	VZEROUPPER
	RET

// Constants of round32AVX2: 2^-126 (the smallest normal float32) as a
// float64, broadcast.
DATA round32min<>+0(SB)/8, $0x3810000000000000
GLOBL round32min<>(SB), RODATA|NOPTR, $8

// func round32AVX2(x *float64, x32 *float32, n int)
//
// Round32 of x[l] for l in [0, n), n a positive multiple of 4: x[l] is
// replaced by its nearest float32 value (VCVTPD2PS under the default
// rounding, as Go's conversion), and a positive x[l] whose result is
// below 2^-126 becomes 2^-126; with x32 non-nil the float32 values are
// also stored there.
TEXT ·round32AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ x32+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPD Y5, Y5, Y5
	VBROADCASTSD round32min<>(SB), Y6
	XORQ AX, AX
round:
	VMOVUPD (SI)(AX*8), Y0
	VCVTPD2PSY Y0, X1
	VCVTPS2PD X1, Y2
	VCMPPD $0x1e, Y5, Y0, Y3 // v > 0
	VCMPPD $0x11, Y6, Y2, Y4 // r < 2^-126
	VANDPD Y3, Y4, Y4
	VBLENDVPD Y4, Y6, Y2, Y2
	VMOVUPD Y2, (SI)(AX*8)
	TESTQ DI, DI
	JZ next
	VCVTPD2PSY Y2, X1
	VMOVUPS X1, (DI)(AX*4)
next:
	ADDQ $4, AX
	CMPQ AX, CX
	JLT round
	VZEROUPPER
	RET
