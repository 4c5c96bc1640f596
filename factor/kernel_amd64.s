//go:build amd64 && !purego

#include "textflag.h"

// ROW(off, r): r = the row of kt whose index is at off(R10).
#define ROW(off, r) MOVLQSX off(R10), r; IMULQ DX, r; ADDQ R8, r

// DOT(row, t, acc): acc += d ⊙ (that row), one chunk (AX: its offset).
#define DOT(row, t, acc) VMULPD (row)(AX*1), Y4, t; VADDPD t, acc, acc

// SCAT(row, s, t, d, acc): one term's chunk of phase B: t = s·(d ⊙ row);
// the dh chunk acc += t; the kh row (row + R9) += t.
#define SCAT(row, s, t, d, acc) VMULPD (row), d, t; VMULPD t, s, t; VADDPD t, acc, acc; VADDPD (row)(R9*1), t, t; VMOVUPD t, (row)(R9*1)

// func runAVX2(d, dh, kt, kh, sv *float64, cols *int32, vals *float64, gs *float64, n, mbytes int)
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
// multiple of 4; sv has room for n values. Multiplication and addition
// are commutative in IEEE arithmetic, so swapping the roles of the two
// factors leaves every bit unchanged.
//
// It runs in two phases. Phase A computes every g and s = c/g of the
// column (into gs and sv), four nonzeros at a time where four are left:
// the four dot products run side by side (four independent chains of
// additions instead of one), their g are paired and summed as one vector
// (VHADDPD and VPERM2F128 add the lanes exactly as (g0+g1)+(g2+g3)) and
// divided as one; two left go the same way with two chains, one alone.
// No g waits for a division, and rows of kt and kh 8 nonzeros ahead are
// prefetched. Phase B scatters in nonzero order: four (two, one) at a
// time, each t recomputed (the same product, the same bits) and the terms
// added to each chunk of dh in nonzero order, the chunk held in a
// register. Rows of kh are distinct within a column, so the order of the
// adds into dh and into each kh row is that of the one-at-a-time loop.
TEXT ·runAVX2(SB), NOSPLIT, $0-80
	MOVQ d+0(FP), DI
	MOVQ dh+8(FP), SI
	MOVQ kt+16(FP), R8
	MOVQ kh+24(FP), R9
	MOVQ sv+32(FP), AX
	MOVQ AX, X14
	MOVQ cols+40(FP), R10
	MOVQ vals+48(FP), R11
	MOVQ gs+56(FP), R12
	MOVQ n+64(FP), CX
	MOVQ mbytes+72(FP), DX
	SUBQ R8, R9 // kh row = kt row + R9 (kt and kh have one shape)
	XORQ R15, R15
	CALL column<>(SB)
	VZEROUPPER
	RET

// column<> is runAVX2's body with its arguments in registers: DI = d,
// SI = dh, R8 = kt, R9 = kh − kt, R10 = cols, R11 = vals, R12 = gs,
// CX = n, DX = mbytes, X14 = sv, R15 ≠ 0 for phase B in AVX-512 (then
// mbytes is a multiple of 64). It keeps DI, R8, R9 and DX and clobbers the
// other general registers and Z0–Z13.
TEXT column<>(SB), NOSPLIT, $32-0
	MOVQ SI, 0(SP)
	MOVQ R10, 8(SP)
	MOVQ CX, 16(SP)
	MOVQ R15, 24(SP)
	MOVQ X14, SI

agroup:
	CMPQ CX, $4
	JLT apair

	// Prefetch the rows 8..11 ahead that exist.
	CMPQ CX, $12
	JLT agload
	MOVLQSX 32(R10), AX
	CALL prefetchRows<>(SB)
	MOVLQSX 36(R10), AX
	CALL prefetchRows<>(SB)
	MOVLQSX 40(R10), AX
	CALL prefetchRows<>(SB)
	MOVLQSX 44(R10), AX
	CALL prefetchRows<>(SB)

agload:
	// BX, R13, R14, R15: the four rows of kt.
	ROW(0, BX)
	ROW(4, R13)
	ROW(8, R14)
	ROW(12, R15)

	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	XORQ AX, AX
agdot:
	VMOVUPD (DI)(AX*1), Y4
	DOT(BX, Y5, Y0)
	DOT(R13, Y6, Y1)
	DOT(R14, Y7, Y2)
	DOT(R15, Y8, Y3)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT agdot

	VHADDPD Y1, Y0, Y8            // a0+a1, b0+b1, a2+a3, b2+b3
	VHADDPD Y3, Y2, Y9            // c0+c1, d0+d1, c2+c3, d2+d3
	VPERM2F128 $0x20, Y9, Y8, Y10 // a0+a1, b0+b1, c0+c1, d0+d1
	VPERM2F128 $0x31, Y9, Y8, Y11 // a2+a3, b2+b3, c2+c3, d2+d3
	VADDPD Y11, Y10, Y12
	VMOVUPD Y12, (R12)
	VMOVUPD (R11), Y13
	VDIVPD Y12, Y13, Y13 // c/g
	VMOVUPD Y13, (SI)

	ADDQ $16, R10
	ADDQ $32, R11
	ADDQ $32, R12
	ADDQ $32, SI
	SUBQ $4, CX
	JMP agroup

apair:
	CMPQ CX, $2
	JLT asingle
	ROW(0, BX)
	ROW(4, R13)

	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	XORQ AX, AX
apdot:
	VMOVUPD (DI)(AX*1), Y4
	DOT(BX, Y5, Y0)
	DOT(R13, Y6, Y1)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT apdot

	VHADDPD Y1, Y0, Y8 // a0+a1, b0+b1, a2+a3, b2+b3
	VEXTRACTF128 $1, Y8, X9
	VADDPD X9, X8, X12 // (a0+a1)+(a2+a3), (b0+b1)+(b2+b3)
	VMOVUPD X12, (R12)
	VMOVUPD (R11), X13
	VDIVPD X12, X13, X13 // c/g
	VMOVUPD X13, (SI)

	ADDQ $8, R10
	ADDQ $16, R11
	ADDQ $16, R12
	ADDQ $16, SI
	SUBQ $2, CX

asingle:
	TESTQ CX, CX
	JLE phaseB
	ROW(0, BX)
	VXORPD Y0, Y0, Y0
	XORQ AX, AX
asdot:
	VMOVUPD (DI)(AX*1), Y1
	VMULPD (BX)(AX*1), Y1, Y1
	VADDPD Y1, Y0, Y0
	ADDQ $32, AX
	CMPQ AX, DX
	JLT asdot

	VEXTRACTF128 $1, Y0, X2
	VHADDPD X0, X0, X0
	VHADDPD X2, X2, X2
	VADDSD X2, X0, X0
	VMOVSD X0, (R12)
	VMOVSD (R11), X1
	VDIVSD X0, X1, X1
	VMOVSD X1, (SI)

phaseB:
	MOVQ 0(SP), SI
	MOVQ X14, R11
	MOVQ 8(SP), R10
	MOVQ 16(SP), CX
	CMPQ 24(SP), $0
	JNE zgroup

bgroup:
	CMPQ CX, $4
	JLT bpair
	ROW(0, BX)
	ROW(4, R13)
	ROW(8, R14)
	ROW(12, R15)
	VBROADCASTSD (R11), Y0
	VBROADCASTSD 8(R11), Y1
	VBROADCASTSD 16(R11), Y2
	VBROADCASTSD 24(R11), Y3

	// Every pointer steps a chunk at a time.
	MOVQ DX, AX
bgscatter:
	VMOVUPD (DI), Y4
	VMOVUPD (SI), Y5
	SCAT(BX, Y0, Y6, Y4, Y5)
	SCAT(R13, Y1, Y7, Y4, Y5)
	SCAT(R14, Y2, Y8, Y4, Y5)
	SCAT(R15, Y3, Y9, Y4, Y5)
	VMOVUPD Y5, (SI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, R13
	ADDQ $32, R14
	ADDQ $32, R15
	SUBQ $32, AX
	JG bgscatter
	SUBQ DX, DI
	SUBQ DX, SI

	ADDQ $16, R10
	ADDQ $32, R11
	SUBQ $4, CX
	JMP bgroup

bpair:
	CMPQ CX, $2
	JLT bsingle
	ROW(0, BX)
	ROW(4, R13)
	VBROADCASTSD (R11), Y0
	VBROADCASTSD 8(R11), Y1

	MOVQ DX, AX
bpscatter:
	VMOVUPD (DI), Y4
	VMOVUPD (SI), Y5
	SCAT(BX, Y0, Y6, Y4, Y5)
	SCAT(R13, Y1, Y7, Y4, Y5)
	VMOVUPD Y5, (SI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, R13
	SUBQ $32, AX
	JG bpscatter
	SUBQ DX, DI
	SUBQ DX, SI

	ADDQ $8, R10
	ADDQ $16, R11
	SUBQ $2, CX

bsingle:
	TESTQ CX, CX
	JLE done
	ROW(0, BX)
	VBROADCASTSD (R11), Y0
	MOVQ DX, AX
bsscatter:
	VMOVUPD (DI), Y4
	VMOVUPD (SI), Y5
	SCAT(BX, Y0, Y6, Y4, Y5)
	VMOVUPD Y5, (SI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, BX
	SUBQ $32, AX
	JG bsscatter
	SUBQ DX, DI
	SUBQ DX, SI

	JMP done

	// Phase B in AVX-512 (R15 ≠ 0 at entry; mbytes a multiple of 64):
	// the same operations on eight elements at a time instead of four.
	// Elementwise, so the bits are those of the four-wide code.
zgroup:
	CMPQ CX, $4
	JLT zpair
	ROW(0, BX)
	ROW(4, R13)
	ROW(8, R14)
	ROW(12, R15)
	VBROADCASTSD (R11), Z0
	VBROADCASTSD 8(R11), Z1
	VBROADCASTSD 16(R11), Z2
	VBROADCASTSD 24(R11), Z3

	// Every pointer steps 64 bytes (8 elements) at a time.
	MOVQ DX, AX
zgscatter:
	VMOVUPD (DI), Z4
	VMOVUPD (SI), Z5
	SCAT(BX, Z0, Z6, Z4, Z5)
	SCAT(R13, Z1, Z7, Z4, Z5)
	SCAT(R14, Z2, Z8, Z4, Z5)
	SCAT(R15, Z3, Z9, Z4, Z5)
	VMOVUPD Z5, (SI)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, R13
	ADDQ $64, R14
	ADDQ $64, R15
	SUBQ $64, AX
	JG zgscatter
	SUBQ DX, DI
	SUBQ DX, SI

	ADDQ $16, R10
	ADDQ $32, R11
	SUBQ $4, CX
	JMP zgroup

zpair:
	CMPQ CX, $2
	JLT zsingle
	ROW(0, BX)
	ROW(4, R13)
	VBROADCASTSD (R11), Z0
	VBROADCASTSD 8(R11), Z1

	MOVQ DX, AX
zpscatter:
	VMOVUPD (DI), Z4
	VMOVUPD (SI), Z5
	SCAT(BX, Z0, Z6, Z4, Z5)
	SCAT(R13, Z1, Z7, Z4, Z5)
	VMOVUPD Z5, (SI)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, R13
	SUBQ $64, AX
	JG zpscatter
	SUBQ DX, DI
	SUBQ DX, SI

	ADDQ $8, R10
	ADDQ $16, R11
	SUBQ $2, CX

zsingle:
	TESTQ CX, CX
	JLE zdone
	ROW(0, BX)
	VBROADCASTSD (R11), Z0
	MOVQ DX, AX
zsscatter:
	VMOVUPD (DI), Z4
	VMOVUPD (SI), Z5
	SCAT(BX, Z0, Z6, Z4, Z5)
	VMOVUPD Z5, (SI)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, BX
	SUBQ $64, AX
	JG zsscatter
	SUBQ DX, DI
	SUBQ DX, SI

zdone:
	VZEROUPPER
	RET

done:
	RET

// prefetchRows<> hints row AX of kt (PREFETCHT0) and of kh, DX bytes
// each, for runAVX2 (R8: kt, R9: kh − kt). It clobbers AX and BX only.
TEXT prefetchRows<>(SB), NOSPLIT|NOFRAME, $0-0
	IMULQ DX, AX
	ADDQ R8, AX
	MOVQ DX, BX
prefetchRow:
	PREFETCHT0 (AX)
	PREFETCHT0 (AX)(R9*1)
	ADDQ $64, AX
	SUBQ $64, BX
	JG prefetchRow
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

// EntryFloor (accumulate.go) as a float64, for commitAVX2.
DATA commitfloor<>+0(SB)/8, $0x20ca2fe76a3f9475
GLOBL commitfloor<>(SB), RODATA|NOPTR, $8

// func commitAVX2(row, src, f *float64, n int, keep float64, each, floor int)
//
// commitEntry for row[l], l in [0, n), n a positive multiple of 4:
// row[l] = keep·row[l] + f_l·src[l], both products rounded before the
// sum, then EntryFloor where the sum is below it, row[l] was positive
// and floor is 1. With each = 1, f_l = f[l] and an entry whose f[l] is
// 0 keeps its value (a row of K); with each = 0, f_l = f[0] for all l
// (a row of D). Elementwise, so bitwise the scalar loop.
TEXT ·commitAVX2(SB), NOSPLIT, $0-56
	MOVQ row+0(FP), SI
	MOVQ src+8(FP), DI
	MOVQ f+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSD keep+32(FP), Y7
	MOVQ each+40(FP), R8
	MOVQ floor+48(FP), R9
	VBROADCASTSD commitfloor<>(SB), Y6
	VXORPD Y5, Y5, Y5
	VBROADCASTSD (DX), Y8
	XORQ AX, AX
centry:
	VMOVUPD (SI)(AX*8), Y0 // v
	VMOVAPD Y8, Y1
	TESTQ R8, R8
	JZ cf
	VMOVUPD (DX)(AX*8), Y1 // f_l
cf:
	VMULPD (DI)(AX*8), Y1, Y2 // f_l·src
	VMULPD Y0, Y7, Y3         // keep·v
	VADDPD Y2, Y3, Y3         // w
	TESTQ R9, R9
	JZ cmask
	VCMPPD $0x11, Y6, Y3, Y4 // w < floor
	VCMPPD $0x1e, Y5, Y0, Y9 // v > 0
	VANDPD Y9, Y4, Y4
	VBLENDVPD Y4, Y6, Y3, Y3
cmask:
	TESTQ R8, R8
	JZ cstore
	VCMPPD $0x04, Y5, Y1, Y4 // f_l != 0
	VBLENDVPD Y4, Y3, Y0, Y3
cstore:
	VMOVUPD Y3, (SI)(AX*8)
	ADDQ $4, AX
	CMPQ AX, CX
	JLT centry
	VZEROUPPER
	RET

// Offsets of colArgs' fields (kernel_amd64.go; TestColArgsLayout).
#define CA_KT 0
#define CA_KH 8
#define CA_DL 16
#define CA_DHL 24
#define CA_SV 32
#define CA_COL 40
#define CA_COLS 48
#define CA_PTR 56
#define CA_ROWS 64
#define CA_VALS 72
#define CA_GS 80
#define CA_C0 88
#define CA_C1 96
#define CA_MBYTES 104
#define CA_FUSED 112
#define CA_AHEAD 120
#define CA_Z512 128
#define CA_KT32 136
#define CA_K 144

// func runColsAVX2(a *colArgs)
//
// The columns at positions [c0, c1) of a block's pass: for each, what
// runColumns does around runAVX2 in Go, without a call per column. Row
// j = cols[c] of K is d; the K̂ terms go to row c of kh (a partial's
// KhT), or, fused, to row j of kh (the reduction's destination): straight
// in when the column has one term (0 + w is w), else summed from zero in
// the scratch row col and then added. The rows of K (and, fused, of kh)
// of the column ahead positions on are prefetched. With kt32 non-nil the
// rows of K are read from that float32 copy, each widened into the
// scratch row k first (exactly, as widen does). Locals: 0(SP) = c,
// 8(SP) = j·mbytes.
TEXT ·runColsAVX2(SB), NOSPLIT, $16-8
	MOVQ a+0(FP), AX
	MOVQ CA_C0(AX), BX
	MOVQ BX, 0(SP)

cloop:
	MOVQ a+0(FP), AX
	MOVQ 0(SP), BX
	CMPQ BX, CA_C1(AX)
	JGE cend
	MOVQ CA_MBYTES(AX), DX

	// Prefetch the rows of the column ahead positions on.
	MOVQ BX, CX
	ADDQ CA_AHEAD(AX), CX
	CMPQ CX, CA_C1(AX)
	JGE cnopf
	MOVQ CA_COLS(AX), R10
	MOVLQSX (R10)(CX*4), R11
	IMULQ DX, R11
	CMPQ CA_KT32(AX), $0
	JNE cpf32
	MOVQ CA_KT(AX), R12
	ADDQ R11, R12
	MOVQ DX, R13
	CMPQ CA_FUSED(AX), $0
	JEQ cpfr
	MOVQ CA_KH(AX), R14
	ADDQ R11, R14
cpfrw:
	PREFETCHT0 (R12)
	BYTE $0x41; BYTE $0x0F; BYTE $0x0D; BYTE $0x0E // PREFETCHW (R14)
	ADDQ $64, R12
	ADDQ $64, R14
	SUBQ $64, R13
	JG cpfrw
	JMP cnopf
cpfr:
	PREFETCHT0 (R12)
	ADDQ $64, R12
	SUBQ $64, R13
	JG cpfr
	JMP cnopf
cpf32:
	// A float32 copy of K: its row is half the bytes.
	MOVQ R11, R12
	SHRQ $1, R12
	ADDQ CA_KT32(AX), R12
	MOVQ DX, R13
	SHRQ $1, R13
cpf32r:
	PREFETCHT0 (R12)
	ADDQ $64, R12
	SUBQ $64, R13
	JG cpf32r
	CMPQ CA_FUSED(AX), $0
	JEQ cnopf
	MOVQ CA_KH(AX), R14
	ADDQ R11, R14
	MOVQ DX, R13
cpf32w:
	BYTE $0x41; BYTE $0x0F; BYTE $0x0D; BYTE $0x0E // PREFETCHW (R14)
	ADDQ $64, R14
	SUBQ $64, R13
	JG cpf32w

cnopf:
	MOVQ CA_COLS(AX), R10
	MOVLQSX (R10)(BX*4), R15
	IMULQ DX, R15 // j·mbytes
	MOVQ R15, 8(SP)
	MOVQ CA_PTR(AX), R10
	MOVLQSX (R10)(BX*4), R13  // lo
	MOVLQSX 4(R10)(BX*4), CX  // hi
	SUBQ R13, CX              // the column's terms
	MOVQ CA_KT32(AX), R14
	TESTQ R14, R14
	JNZ cwiden
	MOVQ CA_KT(AX), DI
	ADDQ R15, DI
	JMP cdest
cwiden:
	// Row j of the float32 copy, widened (exactly) into the scratch row k.
	MOVQ R15, R12
	SHRQ $1, R12
	ADDQ R12, R14
	MOVQ CA_K(AX), DI
	XORQ R12, R12
	XORQ R11, R11
cwidenl:
	VCVTPS2PD (R14)(R12*1), Y0
	VMOVUPD Y0, (DI)(R11*1)
	ADDQ $16, R12
	ADDQ $32, R11
	CMPQ R11, DX
	JLT cwidenl
cdest:
	CMPQ CA_FUSED(AX), $0
	JEQ cpartial
	CMPQ CX, $1
	JNE cmulti
	MOVQ CA_KH(AX), SI
	ADDQ R15, SI
	JMP ccall
cmulti:
	MOVQ CA_COL(AX), SI
	VXORPD Y0, Y0, Y0
	XORQ R14, R14
czero:
	VMOVUPD Y0, (SI)(R14*1)
	ADDQ $32, R14
	CMPQ R14, DX
	JLT czero
	JMP ccall
cpartial:
	MOVQ BX, SI
	IMULQ DX, SI
	ADDQ CA_KH(AX), SI

ccall:
	MOVQ CA_SV(AX), R14
	MOVQ R14, X14
	MOVQ CA_DL(AX), R8
	MOVQ CA_DHL(AX), R9
	SUBQ R8, R9
	MOVQ CA_ROWS(AX), R10
	LEAQ (R10)(R13*4), R10
	MOVQ CA_VALS(AX), R11
	LEAQ (R11)(R13*8), R11
	MOVQ CA_GS(AX), R12
	LEAQ (R12)(R13*8), R12
	MOVQ CA_Z512(AX), R15
	CALL column<>(SB)

	// Fused, several terms: add the column's sum into row j of kh.
	MOVQ a+0(FP), AX
	CMPQ CA_FUSED(AX), $0
	JEQ cnext
	MOVQ 0(SP), BX
	MOVQ CA_PTR(AX), R10
	MOVLQSX (R10)(BX*4), R13
	MOVLQSX 4(R10)(BX*4), CX
	SUBQ R13, CX
	CMPQ CX, $1
	JEQ cnext
	MOVQ CA_KH(AX), SI
	ADDQ 8(SP), SI
	MOVQ CA_COL(AX), R14
	XORQ R13, R13
cadd:
	VMOVUPD (R14)(R13*1), Y0
	VADDPD (SI)(R13*1), Y0, Y0
	VMOVUPD Y0, (SI)(R13*1)
	ADDQ $32, R13
	CMPQ R13, DX
	JLT cadd

cnext:
	INCQ 0(SP)
	JMP cloop

cend:
	VZEROUPPER
	RET

// LOGCORE(r0, ..., r7): the rest of math.Log's operations (archLog)
// from f1 in r2, k in r1 and 1 in r4 to log(x) in r1, on vectors of any
// width (Z for logSumAVX512, Y for logsAVX2): f = f1 − 1,
// s = f / (2 + f), s2 = s·s, s4 = s2·s2,
// t1 = s2·(L1 + s4·(L3 + s4·(L5 + s4·L7))), t2 = s4·(L2 + s4·(L4 + s4·L6)),
// R = t1 + t2, hfsq = 0.5·f·f, then k·Ln2Hi − ((hfsq − (s·(hfsq+R) + k·Ln2Lo)) − f).
#define LOGCORE(r0, r1, r2, r3, r4, r5, r6, r7) \
	VSUBPD r4, r2, r2; \
	VBROADCASTSD logc<>+0x30(SB), r0; \
	VADDPD r2, r0, r0; \
	VDIVPD r0, r2, r3; \
	VMULPD r3, r3, r4; \
	VMULPD r4, r4, r5; \
	VBROADCASTSD logc<>+0x78(SB), r6; \
	VMULPD r5, r6, r6; \
	VBROADCASTSD logc<>+0x68(SB), r7; \
	VADDPD r7, r6, r6; \
	VMULPD r5, r6, r6; \
	VBROADCASTSD logc<>+0x58(SB), r7; \
	VADDPD r7, r6, r6; \
	VMULPD r5, r6, r6; \
	VBROADCASTSD logc<>+0x48(SB), r7; \
	VADDPD r7, r6, r6; \
	VMULPD r6, r4, r4; \
	VBROADCASTSD logc<>+0x70(SB), r6; \
	VMULPD r5, r6, r6; \
	VBROADCASTSD logc<>+0x60(SB), r7; \
	VADDPD r7, r6, r6; \
	VMULPD r5, r6, r6; \
	VBROADCASTSD logc<>+0x50(SB), r7; \
	VADDPD r7, r6, r6; \
	VMULPD r6, r5, r5; \
	VADDPD r5, r4, r4; \
	VBROADCASTSD logc<>+0x08(SB), r0; \
	VMULPD r2, r0, r0; \
	VMULPD r2, r0, r0; \
	VADDPD r0, r4, r4; \
	VMULPD r4, r3, r3; \
	VBROADCASTSD logc<>+0x40(SB), r4; \
	VMULPD r1, r4, r4; \
	VADDPD r4, r3, r3; \
	VSUBPD r3, r0, r0; \
	VSUBPD r2, r0, r0; \
	VBROADCASTSD logc<>+0x38(SB), r4; \
	VMULPD r4, r1, r1; \
	VSUBPD r0, r1, r1

// LOG512 is math.Log's operations (archLog) on eight lanes after the
// checks, with fixed registers (logSumAVX512, logsAVX512,
// logRowSumAVX512): from x in Z0 and its exponent field in Z1, with the
// mantissa mask, 0.5, 0x7FF and 0x3FE broadcast in Z16–Z19, it leaves
// log(x) in Z1 (Z0, Z2–Z7 and K2 scratch): f1 = mantissa | 0.5,
// k = float64(exponent − 0x3FE); if !(sqrt(2)/2 < f1) { k -= 1; f1 *= 2 }
// else { k -= 0; f1 *= 1 }; then LOGCORE.
#define LOG512 \
	VPANDQ Z16, Z0, Z2; \
	VPORQ Z17, Z2, Z2; \
	VPSUBQ Z19, Z1, Z1; \
	VCVTQQ2PD Z1, Z1; \
	VBROADCASTSD logc<>+0x20(SB), Z0; \
	VCMPPD $5, Z2, Z0, K2; \
	VPXORQ Z3, Z3, Z3; \
	VBROADCASTSD logc<>+0x28(SB), Z4; \
	VMOVAPD Z4, K2, Z3; \
	VSUBPD Z3, Z1, Z1; \
	VADDPD Z4, Z3, Z3; \
	VMULPD Z3, Z2, Z2; \
	LOGCORE(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)

// Constants of logSumAVX512 (those of math.Log's amd64 assembly).
DATA logc<>+0x00(SB)/8, $0x000FFFFFFFFFFFFF // mantissa
DATA logc<>+0x08(SB)/8, $0x3FE0000000000000 // 0.5
DATA logc<>+0x10(SB)/8, $0x00000000000007FF // exponent
DATA logc<>+0x18(SB)/8, $0x00000000000003FE
DATA logc<>+0x20(SB)/8, $7.07106781186547524401e-01 // sqrt(2)/2
DATA logc<>+0x28(SB)/8, $1.0
DATA logc<>+0x30(SB)/8, $2.0
DATA logc<>+0x38(SB)/8, $6.93147180369123816490e-01 // Ln2Hi
DATA logc<>+0x40(SB)/8, $1.90821492927058770002e-10 // Ln2Lo
DATA logc<>+0x48(SB)/8, $6.666666666666735130e-01   // L1
DATA logc<>+0x50(SB)/8, $3.999999999940941908e-01   // L2
DATA logc<>+0x58(SB)/8, $2.857142874366239149e-01   // L3
DATA logc<>+0x60(SB)/8, $2.222219843214978396e-01   // L4
DATA logc<>+0x68(SB)/8, $1.818357216161805012e-01   // L5
DATA logc<>+0x70(SB)/8, $1.531383769920937332e-01   // L6
DATA logc<>+0x78(SB)/8, $1.479819860511658591e-01   // L7
GLOBL logc<>(SB), RODATA|NOPTR, $0x80

// func logSumAVX512(ll *float64, gs, v *float64, groups int) int
//
// For groups of eight g (positive, so neither zero nor negative), *ll +=
// v·log(g) term by term in order, with log computed by exactly the
// operations of math.Log's amd64 assembly (archLog: the exponent and
// mantissa taken from the bits, the same polynomial in the same order),
// eight lanes at a time: every log and every product is bitwise the
// scalar one, and the sum is still one addition after another. It stops
// before a group with an infinite or NaN g (archLog returns those as
// they are) and returns the number of groups done.
TEXT ·logSumAVX512(SB), NOSPLIT, $64-40
	MOVQ ll+0(FP), DI
	MOVQ gs+8(FP), SI
	MOVQ v+16(FP), DX
	MOVQ groups+24(FP), CX
	XORQ AX, AX
	VMOVSD (DI), X20
	VPBROADCASTQ logc<>+0x00(SB), Z16
	VPBROADCASTQ logc<>+0x08(SB), Z17
	VPBROADCASTQ logc<>+0x10(SB), Z18
	VPBROADCASTQ logc<>+0x18(SB), Z19
lgroup:
	CMPQ AX, CX
	JGE ldone
	VMOVUPD (SI), Z0
	// Infinite or NaN lanes: exponent 0x7FF.
	VPSRLQ $52, Z0, Z1
	VPANDQ Z18, Z1, Z1
	VPCMPEQQ Z18, Z1, K1
	KORTESTB K1, K1
	JNZ ldone
	LOG512
	// ll += v·log(g), one term after another.
	VMULPD (DX), Z1, Z1
	VMOVUPD Z1, 0(SP)
	VADDSD 0(SP), X20, X20
	VADDSD 8(SP), X20, X20
	VADDSD 16(SP), X20, X20
	VADDSD 24(SP), X20, X20
	VADDSD 32(SP), X20, X20
	VADDSD 40(SP), X20, X20
	VADDSD 48(SP), X20, X20
	VADDSD 56(SP), X20, X20
	ADDQ $64, SI
	ADDQ $64, DX
	INCQ AX
	JMP lgroup
ldone:
	VMOVSD X20, (DI)
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET

// func prefetchIdx(kt, kh *float64, idx *int32, n, mbytes int)
//
// For q in [0, n), with j = idx[q]: hints row j of kt for reading
// (PREFETCHT0) and row j of kh for writing (PREFETCHW), mbytes each (a
// multiple of 64 or not: the rows' lines from their first byte on).
TEXT ·prefetchIdx(SB), NOSPLIT, $0-40
	MOVQ kt+0(FP), R8
	MOVQ kh+8(FP), R9
	MOVQ idx+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ mbytes+32(FP), DX
	SUBQ R8, R9
	TESTQ CX, CX
	JLE pidone
pirow:
	MOVLQSX (R10), AX
	IMULQ DX, AX
	ADDQ R8, AX
	MOVQ AX, BX
	ANDQ $63, BX
	ADDQ DX, BX
piline:
	PREFETCHT0 (AX)
	BYTE $0x42; BYTE $0x0F; BYTE $0x0D; BYTE $0x0C; BYTE $0x08 // PREFETCHW (AX)(R9*1)
	ADDQ $64, AX
	SUBQ $64, BX
	JG piline
	ADDQ $4, R10
	DECQ CX
	JNZ pirow
pidone:
	RET


// Constants of logsAVX2 beside logc<>: the bits of 2^52 (0x4330...) and
// 2^52 + 0x3FE as a float64, which turn an exponent field into k exactly.
DATA logc2<>+0x00(SB)/8, $0x4330000000000000
DATA logc2<>+0x08(SB)/8, $4503599627371518.0 // 2^52 + 0x3FE
GLOBL logc2<>(SB), RODATA|NOPTR, $0x10

// func logsAVX2(dst, src *float64, groups int) int
//
// For groups of four x (positive and finite), dst = log(x) computed by
// exactly the operations of math.Log's amd64 assembly (archLog), four
// lanes at a time, as logSumAVX512 does eight: every value is bitwise
// math.Log's. AVX2 has no VCVTQQ2PD: k = exponent − 0x3FE is taken as
// (2^52 + exponent) − (2^52 + 0x3FE), both exact, archLog's k exactly.
// It stops before a group with a lane that is zero, negative, infinite or
// NaN (archLog's special cases) and returns the number of groups done.
TEXT ·logsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	XORQ AX, AX
	VPBROADCASTQ logc<>+0x00(SB), Y12 // mantissa
	VPBROADCASTQ logc<>+0x08(SB), Y13 // 0.5
	VPBROADCASTQ logc<>+0x10(SB), Y14 // 0x7FF
	VPBROADCASTQ logc2<>+0x00(SB), Y15 // 2^52's bits
	VPXOR Y11, Y11, Y11
l2group:
	CMPQ AX, CX
	JGE l2done
	VMOVUPD (SI), Y0
	// Special lanes: not > 0 as an integer (sign, or zero), or exponent 0x7FF.
	VPSRLQ $52, Y0, Y1
	VPAND Y14, Y1, Y1
	VPCMPEQQ Y14, Y1, Y2
	VPCMPGTQ Y11, Y0, Y3
	VPANDN Y3, Y2, Y2
	VMOVMSKPD Y2, BX
	CMPQ BX, $15
	JNE l2done
	// f1 = mantissa | 0.5; k = float64(exponent − 0x3FE).
	VPAND Y12, Y0, Y2
	VPOR Y13, Y2, Y2
	VPOR Y15, Y1, Y1
	VBROADCASTSD logc2<>+0x08(SB), Y4
	VSUBPD Y4, Y1, Y1
	// if !(sqrt(2)/2 < f1) { k -= 1; f1 *= 2 } else { k -= 0; f1 *= 1 }
	VBROADCASTSD logc<>+0x20(SB), Y0
	VCMPPD $5, Y2, Y0, Y3
	VBROADCASTSD logc<>+0x28(SB), Y4 // 1
	VANDPD Y4, Y3, Y3
	VSUBPD Y3, Y1, Y1
	VADDPD Y4, Y3, Y3
	VMULPD Y3, Y2, Y2
	LOGCORE(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VMOVUPD Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	INCQ AX
	JMP l2group
l2done:
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET

// Constants of expsAVX2: those of math.Exp's amd64 assembly (archExp).
DATA expc<>+0x00(SB)/8, $0.5
DATA expc<>+0x08(SB)/8, $1.0
DATA expc<>+0x10(SB)/8, $2.0
DATA expc<>+0x18(SB)/8, $1.6666666666666666667e-1
DATA expc<>+0x20(SB)/8, $4.1666666666666666667e-2
DATA expc<>+0x28(SB)/8, $8.3333333333333333333e-3
DATA expc<>+0x30(SB)/8, $1.3888888888888888889e-3
DATA expc<>+0x38(SB)/8, $1.9841269841269841270e-4
DATA expc<>+0x40(SB)/8, $2.4801587301587301587e-5
DATA expc<>+0x48(SB)/8, $1.4426950408889634073599246810018920 // LOG2E
DATA expc<>+0x50(SB)/8, $0.69314718055966295651160180568695068359375 // LN2U
DATA expc<>+0x58(SB)/8, $0.28235290563031577122588448175013436025525412068e-12 // LN2L
DATA expc<>+0x60(SB)/8, $7.09782712893384e+02 // Overflow
DATA expc<>+0x68(SB)/8, $0.0625
DATA expc<>+0x70(SB)/8, $0x7FEFFFFFFFFFFFFF // the largest finite, as bits
DATA expc<>+0x78(SB)/8, $0x7FFFFFFFFFFFFFFF // all but the sign
DATA expc<>+0x80(SB)/8, $0x00000000000003FF // the exponent's bias
DATA expc<>+0x88(SB)/8, $0x00000000000007FF
GLOBL expc<>(SB), RODATA|NOPTR, $0x90

// EXPCORE is archExp's avxfma path from the rounded exponent on, on
// vectors of any width (Y for expsAVX2, Z for expsAVX512): with x in x,
// k = round(LOG2E·x) as float64 in k and e = k + 0x3FF as int64 lanes
// in e, it leaves exp(x) in x (p, t and one are scratch):
// x −= k·LN2U; x −= k·LN2L (fused); x *= 0.0625; the Taylor series
// p = ((((((c8·x + c7)·x + c6)·x + c5)·x + c4)·x + c3)·x + 0.5)·x + 1
// with fused multiply-adds; x = x·p; three times x = x·(x + 2); then
// x = x·(x + 2) + 1 (fused); times 2^k, e << 52 as bits.
#define EXPCORE(x, p, k, e, t, one) \
	VBROADCASTSD expc<>+0x50(SB), t; \
	VFNMADD231PD t, k, x; \
	VBROADCASTSD expc<>+0x58(SB), t; \
	VFNMADD231PD t, k, x; \
	VBROADCASTSD expc<>+0x68(SB), t; \
	VMULPD t, x, x; \
	VBROADCASTSD expc<>+0x40(SB), p; \
	VBROADCASTSD expc<>+0x38(SB), t; \
	VFMADD213PD t, x, p; \
	VBROADCASTSD expc<>+0x30(SB), t; \
	VFMADD213PD t, x, p; \
	VBROADCASTSD expc<>+0x28(SB), t; \
	VFMADD213PD t, x, p; \
	VBROADCASTSD expc<>+0x20(SB), t; \
	VFMADD213PD t, x, p; \
	VBROADCASTSD expc<>+0x18(SB), t; \
	VFMADD213PD t, x, p; \
	VBROADCASTSD expc<>+0x00(SB), t; \
	VFMADD213PD t, x, p; \
	VBROADCASTSD expc<>+0x08(SB), one; \
	VFMADD213PD one, x, p; \
	VMULPD p, x, x; \
	VBROADCASTSD expc<>+0x10(SB), t; \
	VADDPD t, x, p; \
	VMULPD p, x, x; \
	VADDPD t, x, p; \
	VMULPD p, x, x; \
	VADDPD t, x, p; \
	VMULPD p, x, x; \
	VADDPD t, x, p; \
	VFMADD213PD one, p, x; \
	VPSLLQ $52, e, e; \
	VMULPD e, x, x

// func expsAVX2(dst, src *float64, groups int) int
//
// For groups of four x, dst = exp(x) computed by exactly the operations
// of math.Exp's amd64 assembly on a machine with FMA (archExp's avxfma
// path: the exponent rounded by CVTSD2SL, the reduction and the Taylor
// series with fused multiply-adds in the same order, the result scaled
// by 2^k built from bits), four lanes at a time: every value is bitwise
// math.Exp's there. It stops before a group with a lane that takes
// another path of archExp (not finite, above Overflow, or a result whose
// exponent field would be ≤ 0 or ≥ 0x7FF: underflow, subnormal, overflow)
// and returns the number of groups done. The caller checks for FMA.
TEXT ·expsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	XORQ AX, AX
	VPBROADCASTQ expc<>+0x70(SB), Y12 // largest finite
	VPBROADCASTQ expc<>+0x78(SB), Y13 // abs mask
	VPBROADCASTQ expc<>+0x80(SB), Y14 // 0x3FF
	VPBROADCASTQ expc<>+0x88(SB), Y15 // 0x7FF
	VPXOR Y11, Y11, Y11
e2group:
	CMPQ AX, CX
	JGE e2done
	VMOVUPD (SI), Y0
	// finite: |x| as bits <= the largest finite
	VPAND Y13, Y0, Y1
	VPCMPGTQ Y12, Y1, Y1 // not finite
	// x > Overflow
	VBROADCASTSD expc<>+0x60(SB), Y2
	VCMPPD $0x1E, Y2, Y0, Y2 // GT_OQ: x > Overflow
	VPOR Y2, Y1, Y1
	// k = round(LOG2E·x) (CVTSD2SL), as int32 and back as float64
	VBROADCASTSD expc<>+0x48(SB), Y2
	VMULPD Y0, Y2, Y2
	VCVTPD2DQY Y2, X3
	VCVTDQ2PD X3, Y2
	// e = k + 0x3FF must be in (0, 0x7FF)
	VPMOVSXDQ X3, Y3
	VPADDQ Y14, Y3, Y3
	VPCMPGTQ Y11, Y3, Y4 // e > 0
	VPCMPGTQ Y3, Y15, Y5 // 0x7FF > e
	VPAND Y5, Y4, Y4
	VPANDN Y4, Y1, Y1 // good = !(special) & in range
	VMOVMSKPD Y1, BX
	CMPQ BX, $15
	JNE e2done
	EXPCORE(Y0, Y1, Y2, Y3, Y4, Y5)
	VMOVUPD Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	INCQ AX
	JMP e2group
e2done:
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET

// func ruleProbsAVX2(pr, gs, qs, x, cf *float64, off *int32, mass *float64, groups int, c *ruleConsts) int
//
// ruleProbs four nonzeros at a time (see validation.go): for each group
// of four, b = λ'·g + λ·q (λ' = 1 − λ), and where c.counts, for the
// lanes with x > 0, μ'·((cf − d)₊ + (κ + m)·b)/(x + κ) + μ·b (μ' = 1 − μ,
// m = mass[off]), each a VMULPD, VADDPD, VSUBPD or VDIVPD of the scalar
// operation it replaces (no FMA; addition and multiplication commute
// bitwise): the values of ruleProbs' loop, bitwise. (cf − d)₊ is Go's
// max(cf − d, 0): VMAXPD with 0 as its first source keeps a NaN, and
// adding +0 turns −0 into +0. q advances by c.qstride bytes a group (0:
// the four copies of the uniform q). It stops before a group with a
// value not > 0, unstored, and returns the number of groups done.
TEXT ·ruleProbsAVX2(SB), NOSPLIT, $0-80
	MOVQ pr+0(FP), DI
	MOVQ gs+8(FP), SI
	MOVQ qs+16(FP), DX
	MOVQ x+24(FP), R8
	MOVQ cf+32(FP), R9
	MOVQ off+40(FP), R10
	MOVQ mass+48(FP), R11
	MOVQ groups+56(FP), CX
	MOVQ c+64(FP), R12
	VBROADCASTSD 0(R12), Y8   // λ
	VBROADCASTSD 8(R12), Y9   // 1 − λ
	VBROADCASTSD 16(R12), Y10 // μ
	VBROADCASTSD 24(R12), Y11 // 1 − μ
	VBROADCASTSD 32(R12), Y12 // κ
	VBROADCASTSD 40(R12), Y13 // d
	MOVQ 48(R12), R13         // q's stride
	MOVQ 56(R12), R12         // counts
	VXORPD Y14, Y14, Y14
	XORQ AX, AX
rpgroup:
	CMPQ AX, CX
	JGE rpdone
	VMOVUPD (SI), Y0
	VMULPD Y9, Y0, Y0
	VMOVUPD (DX), Y1
	VMULPD Y8, Y1, Y1
	VADDPD Y1, Y0, Y0 // b
	TESTQ R12, R12
	JZ rpcheck
	VMOVUPD (R8), Y2
	VCMPPD $0x1E, Y14, Y2, Y3 // x > 0
	MOVLQSX 0(R10), BX
	VMOVSD (R11)(BX*8), X4
	MOVLQSX 4(R10), BX
	VMOVHPD (R11)(BX*8), X4, X4
	MOVLQSX 8(R10), BX
	VMOVSD (R11)(BX*8), X5
	MOVLQSX 12(R10), BX
	VMOVHPD (R11)(BX*8), X5, X5
	VINSERTF128 $1, X5, Y4, Y4 // m
	VADDPD Y4, Y12, Y4         // κ + m
	VMULPD Y0, Y4, Y4          // (κ + m)·b
	VMOVUPD (R9), Y5
	VSUBPD Y13, Y5, Y5         // cf − d
	VMAXPD Y5, Y14, Y5         // 0 > it ? 0 : it
	VADDPD Y14, Y5, Y5         // −0 + 0 = +0
	VADDPD Y4, Y5, Y5
	VMULPD Y5, Y11, Y5         // μ'·(…)
	VADDPD Y12, Y2, Y6         // x + κ
	VDIVPD Y6, Y5, Y5
	VMULPD Y0, Y10, Y6         // μ·b
	VADDPD Y6, Y5, Y5
	VBLENDVPD Y3, Y5, Y0, Y0   // x > 0 ? that : b
rpcheck:
	VCMPPD $0x1E, Y14, Y0, Y1 // > 0
	VMOVMSKPD Y1, BX
	CMPQ BX, $15
	JNE rpdone
	VMOVUPD Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ R13, DX
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $16, R10
	INCQ AX
	JMP rpgroup
rpdone:
	MOVQ AX, ret+72(FP)
	VZEROUPPER
	RET

// func logsAVX512(dst, src *float64, groups int) int
//
// logsAVX2 eight lanes at a time (AVX-512F and DQ): for groups of eight
// x (positive and finite), dst = log(x) by exactly the operations of
// math.Log's amd64 assembly (archLog), as logSumAVX512 takes them: k =
// exponent − 0x3FE is converted by VCVTQQ2PD, exactly. It stops before a
// group with a lane that is zero, negative, infinite or NaN and returns
// the number of groups done.
TEXT ·logsAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	XORQ AX, AX
	VPBROADCASTQ logc<>+0x00(SB), Z16 // mantissa
	VPBROADCASTQ logc<>+0x08(SB), Z17 // 0.5
	VPBROADCASTQ logc<>+0x10(SB), Z18 // 0x7FF
	VPBROADCASTQ logc<>+0x18(SB), Z19 // 0x3FE
	VPXORQ Z20, Z20, Z20
l8group:
	CMPQ AX, CX
	JGE l8done
	VMOVUPD (SI), Z0
	// Ordinary lanes: > 0 as an integer (no sign, not zero) and exponent
	// not 0x7FF.
	VPSRLQ $52, Z0, Z1
	VPANDQ Z18, Z1, Z1
	VPCMPQ $4, Z18, Z1, K1 // exponent != 0x7FF
	VPCMPGTQ Z20, Z0, K2   // x > 0 as an integer
	KANDB K2, K1, K1
	KMOVB K1, BX
	CMPL BX, $0xFF
	JNE l8done
	LOG512
	VMOVUPD Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	INCQ AX
	JMP l8group
l8done:
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET

// func expsAVX512(dst, src *float64, groups int) int
//
// expsAVX2 eight lanes at a time (AVX-512F): for groups of eight x,
// dst = exp(x) by exactly the operations of math.Exp's amd64 assembly on
// a machine with FMA (archExp's avxfma path), in the same order with the
// same fused multiply-adds as expsAVX2. It stops before a group with a
// lane that takes another path of archExp (as expsAVX2) and returns the
// number of groups done. The caller checks for FMA.
TEXT ·expsAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	XORQ AX, AX
	VPBROADCASTQ expc<>+0x70(SB), Z12 // largest finite
	VPBROADCASTQ expc<>+0x78(SB), Z13 // abs mask
	VPBROADCASTQ expc<>+0x80(SB), Z14 // 0x3FF
	VPBROADCASTQ expc<>+0x88(SB), Z15 // 0x7FF
	VBROADCASTSD expc<>+0x60(SB), Z16 // Overflow
	VBROADCASTSD expc<>+0x48(SB), Z17 // LOG2E
	VPXORQ Z11, Z11, Z11
e8group:
	CMPQ AX, CX
	JGE e8done
	VMOVUPD (SI), Z0
	// finite: |x| as bits <= the largest finite
	VPANDQ Z13, Z0, Z1
	VPCMPGTQ Z12, Z1, K1   // not finite
	VCMPPD $0x1E, Z16, Z0, K2 // GT_OQ: x > Overflow
	KORB K2, K1, K1
	// k = round(LOG2E·x) (CVTSD2SL), as int32 and back as float64
	VMULPD Z0, Z17, Z2
	VCVTPD2DQ Z2, Y3
	VCVTDQ2PD Y3, Z2
	// e = k + 0x3FF must be in (0, 0x7FF)
	VPMOVSXDQ Y3, Z3
	VPADDQ Z14, Z3, Z3
	VPCMPGTQ Z11, Z3, K3 // e > 0
	VPCMPGTQ Z3, Z15, K4 // 0x7FF > e
	KANDB K4, K3, K3
	KMOVB K1, BX
	KMOVB K3, DX
	NOTL BX
	ANDL DX, BX
	ANDL $0xFF, BX
	CMPL BX, $0xFF
	JNE e8done
	EXPCORE(Z0, Z1, Z2, Z3, Z4, Z5)
	VMOVUPD Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	INCQ AX
	JMP e8group
e8done:
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET

// The kernels of extrapolate (accel.go) in AVX-512F, eight entries an
// instruction: each entry's operations are the scalar loop's (VMULPD,
// VADDPD, VSUBPD, VDIVPD, no FMA), the masks its branches (a2 > 0 is
// GT_OQ, false on NaN as Go's >; != is NEQ_UQ, true on NaN as Go's !=),
// and sums keep their order (per lane in row order across rows; along a
// row one VADDSD after another), so every value is bitwise the loop's.
// Lengths n and m are positive multiples of 8.

// func combineAVX512(out, a0, a1, a2, l0, l1 *float64, n int, c *float64) int
//
// For q < n, where a2 > 0 and (a0 != a2 or a1 != a2):
// out = (c[0]·l0 + c[1]·l1) + c[2]·out, each product rounded. It
// returns the number of q with a0 != a2 or a1 != a2 (whatever a2).
TEXT ·combineAVX512(SB), NOSPLIT, $0-72
	MOVQ out+0(FP), DI
	MOVQ a0+8(FP), R8
	MOVQ a1+16(FP), R9
	MOVQ a2+24(FP), R10
	MOVQ l0+32(FP), R11
	MOVQ l1+40(FP), R12
	MOVQ n+48(FP), CX
	MOVQ c+56(FP), DX
	VBROADCASTSD 0(DX), Z20
	VBROADCASTSD 8(DX), Z21
	VBROADCASTSD 16(DX), Z22
	VPXORQ Z23, Z23, Z23
	XORQ AX, AX
	XORQ BX, BX
cmbgroup:
	CMPQ AX, CX
	JGE cmbdone
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $4, (R8)(AX*8), Z2, K1 // a2 != a0
	VCMPPD $4, (R9)(AX*8), Z2, K2 // a2 != a1
	KORB K2, K1, K1
	KMOVB K1, R13
	POPCNTL R13, R13
	ADDQ R13, BX
	VCMPPD $0x1E, Z23, Z2, K2 // a2 > 0
	KANDB K2, K1, K1
	VMULPD (R11)(AX*8), Z20, Z0
	VMULPD (R12)(AX*8), Z21, Z1
	VADDPD Z1, Z0, Z0
	VMULPD (DI)(AX*8), Z22, Z1
	VADDPD Z1, Z0, Z0
	VMOVUPD Z0, K1, (DI)(AX*8)
	ADDQ $8, AX
	JMP cmbgroup
cmbdone:
	MOVQ BX, ret+64(FP)
	VZEROUPPER
	RET

// func rowMaxSubAVX512(x, a2 *float64, n int)
//
// One row: mx = the maximum of x over the entries with a2 > 0 (−Inf if
// none), then x = x − mx there and 0 elsewhere. A maximum is the same in
// any order but for the sign of a zero one, and x − (±0) differs only
// in the sign of a zero, which the exponential that follows (exp(±0) =
// 1) does not see. A NaN x (which Go's max would propagate into mx and
// VMAXPD need not) makes its own entry NaN and through the row's sum
// every entry of the row with a2 > 0, as Go's NaN maximum does.
TEXT ·rowMaxSubAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ a2+8(FP), R10
	MOVQ n+16(FP), CX
	VPXORQ Z23, Z23, Z23
	VBROADCASTSD rmsninf<>(SB), Z1
	XORQ AX, AX
rmsmax:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1 // a2 > 0
	VMAXPD (SI)(AX*8), Z1, K1, Z1
	ADDQ $8, AX
	CMPQ AX, CX
	JLT rmsmax
	VEXTRACTF64X4 $1, Z1, Y2
	VMAXPD Y2, Y1, Y1
	VEXTRACTF128 $1, Y1, X2
	VMAXPD X2, X1, X1
	VPERMILPD $1, X1, X2
	VMAXPD X2, X1, X1
	VBROADCASTSD X1, Z1
	XORQ AX, AX
rmssub:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD (SI)(AX*8), Z0
	VSUBPD.Z Z1, Z0, K1, Z0
	VMOVUPD Z0, (SI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, CX
	JLT rmssub
	VZEROUPPER
	RET

DATA rmsninf<>+0(SB)/8, $0xFFF0000000000000 // −Inf
GLOBL rmsninf<>(SB), RODATA|NOPTR, $8

// func rowSumDivAVX512(x, a2 *float64, n int)
//
// One row: x = 0 where !(a2 > 0); s = the sum of the other x in order
// (from 0; adding a 0 for the entries set to 0 leaves every s, never −0,
// as it is); then x = max(x/s, EntryFloor) where a2 > 0 (VMAXPD with the
// quotient second: a NaN quotient stays, as Go's max).
TEXT ·rowSumDivAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ a2+8(FP), R10
	MOVQ n+16(FP), CX
	VPXORQ Z23, Z23, Z23
	VXORPD X5, X5, X5
	XORQ AX, AX
rsdsum:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD.Z (SI)(AX*8), K1, Z0
	VMOVUPD Z0, (SI)(AX*8)
	VADDSD 0(SI)(AX*8), X5, X5
	VADDSD 8(SI)(AX*8), X5, X5
	VADDSD 16(SI)(AX*8), X5, X5
	VADDSD 24(SI)(AX*8), X5, X5
	VADDSD 32(SI)(AX*8), X5, X5
	VADDSD 40(SI)(AX*8), X5, X5
	VADDSD 48(SI)(AX*8), X5, X5
	VADDSD 56(SI)(AX*8), X5, X5
	ADDQ $8, AX
	CMPQ AX, CX
	JLT rsdsum
	VBROADCASTSD X5, Z5
	VBROADCASTSD commitfloor<>(SB), Z6
	XORQ AX, AX
rsddiv:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD (SI)(AX*8), Z0
	VDIVPD Z5, Z0, Z0
	VMAXPD Z0, Z6, Z0
	VMOVUPD Z0, K1, (SI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, CX
	JLT rsddiv
	VZEROUPPER
	RET

// func colMaxAVX512(mx, x, a2 *float64, rows, m int)
//
// For rows rows of m entries: mx[l] = max(mx[l], x) over the entries of
// column l with a2 > 0 (the sign of a zero maximum and a NaN x aside, as
// rowMaxSubAVX512: a NaN x makes every entry of its column with a2 > 0
// NaN through the column's sum).
TEXT ·colMaxAVX512(SB), NOSPLIT, $0-40
	MOVQ mx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ a2+16(FP), R10
	MOVQ rows+24(FP), CX
	MOVQ m+32(FP), DX
	VPXORQ Z23, Z23, Z23
	TESTQ CX, CX
	JLE cmxdone
cmxrow:
	XORQ AX, AX
cmxgroup:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD (DI)(AX*8), Z1
	VMAXPD (SI)(AX*8), Z1, K1, Z1
	VMOVUPD Z1, (DI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, DX
	JLT cmxgroup
	LEAQ (SI)(DX*8), SI
	LEAQ (R10)(DX*8), R10
	DECQ CX
	JNZ cmxrow
cmxdone:
	VZEROUPPER
	RET

// func colSubAVX512(x, a2, mx *float64, rows, m int)
//
// For rows rows of m entries: x = x − mx[l] where a2 > 0, else 0.
TEXT ·colSubAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ a2+8(FP), R10
	MOVQ mx+16(FP), DI
	MOVQ rows+24(FP), CX
	MOVQ m+32(FP), DX
	VPXORQ Z23, Z23, Z23
	TESTQ CX, CX
	JLE csbdone
csbrow:
	XORQ AX, AX
csbgroup:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD (SI)(AX*8), Z0
	VSUBPD.Z (DI)(AX*8), Z0, K1, Z0
	VMOVUPD Z0, (SI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, DX
	JLT csbgroup
	LEAQ (SI)(DX*8), SI
	LEAQ (R10)(DX*8), R10
	DECQ CX
	JNZ csbrow
csbdone:
	VZEROUPPER
	RET

// func colSumAVX512(s, x, a2 *float64, rows, m int)
//
// For rows rows of m entries, in row order: s[l] += x where a2 > 0, else
// x = 0.
TEXT ·colSumAVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ a2+16(FP), R10
	MOVQ rows+24(FP), CX
	MOVQ m+32(FP), DX
	VPXORQ Z23, Z23, Z23
	TESTQ CX, CX
	JLE csmdone
csmrow:
	XORQ AX, AX
csmgroup:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD.Z (SI)(AX*8), K1, Z0
	VMOVUPD Z0, (SI)(AX*8)
	VMOVUPD (DI)(AX*8), Z1
	VADDPD Z0, Z1, K1, Z1
	VMOVUPD Z1, (DI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, DX
	JLT csmgroup
	LEAQ (SI)(DX*8), SI
	LEAQ (R10)(DX*8), R10
	DECQ CX
	JNZ csmrow
csmdone:
	VZEROUPPER
	RET

// func colDivAVX512(x, a2, s *float64, rows, m int)
//
// For rows rows of m entries: x = max(x/s[l], EntryFloor) where a2 > 0.
TEXT ·colDivAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ a2+8(FP), R10
	MOVQ s+16(FP), DI
	MOVQ rows+24(FP), CX
	MOVQ m+32(FP), DX
	VPXORQ Z23, Z23, Z23
	VBROADCASTSD commitfloor<>(SB), Z6
	TESTQ CX, CX
	JLE cdvdone
cdvrow:
	XORQ AX, AX
cdvgroup:
	VMOVUPD (R10)(AX*8), Z2
	VCMPPD $0x1E, Z23, Z2, K1
	VMOVUPD (SI)(AX*8), Z0
	VDIVPD (DI)(AX*8), Z0, Z0
	VMAXPD Z0, Z6, Z0
	VMOVUPD Z0, K1, (SI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, DX
	JLT cdvgroup
	LEAQ (SI)(DX*8), SI
	LEAQ (R10)(DX*8), R10
	DECQ CX
	JNZ cdvrow
cdvdone:
	VZEROUPPER
	RET

// func divRowAVX512(row, h *float64, n int, add, s float64)
//
// mapCommit's row of D (prior.go): row = (h + add)/s for n entries, n a
// positive multiple of 8, the scalar loop's VADDPD and VDIVPD.
TEXT ·divRowAVX512(SB), NOSPLIT, $0-40
	MOVQ row+0(FP), DI
	MOVQ h+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD add+24(FP), Z5
	VBROADCASTSD s+32(FP), Z6
	XORQ AX, AX
drgroup:
	VADDPD (SI)(AX*8), Z5, Z0
	VDIVPD Z6, Z0, Z0
	VMOVUPD Z0, (DI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, CX
	JLT drgroup
	VZEROUPPER
	RET

// func mapKAVX512(kt, kh, base, den, q *float64, rows, m int, pk float64)
//
// mapCommit's rows of K^T (prior.go), rows rows of m entries, m a
// positive multiple of 8: with sq = pk·q[j] for row j, kt = (kh + sq)/den
// where den > 0, else base (the old rows when the commit carries, kt
// itself when in place); den holds y + K per column.
TEXT ·mapKAVX512(SB), NOSPLIT, $0-64
	MOVQ kt+0(FP), DI
	MOVQ kh+8(FP), SI
	MOVQ base+16(FP), R8
	MOVQ den+24(FP), R9
	MOVQ q+32(FP), R10
	MOVQ rows+40(FP), CX
	MOVQ m+48(FP), DX
	VMOVSD pk+56(FP), X7
	VPXORQ Z23, Z23, Z23
	TESTQ CX, CX
	JLE mkdone
mkrow:
	VMULSD (R10), X7, X4
	VBROADCASTSD X4, Z4
	XORQ AX, AX
mkgroup:
	VMOVUPD (R9)(AX*8), Z1
	VCMPPD $0x1E, Z23, Z1, K1 // den > 0
	VADDPD (SI)(AX*8), Z4, Z0
	VDIVPD Z1, Z0, Z0
	VMOVUPD (R8)(AX*8), Z2
	VMOVAPD Z0, K1, Z2
	VMOVUPD Z2, (DI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, DX
	JLT mkgroup
	LEAQ (DI)(DX*8), DI
	LEAQ (SI)(DX*8), SI
	LEAQ (R8)(DX*8), R8
	ADDQ $8, R10
	DECQ CX
	JNZ mkrow
mkdone:
	VZEROUPPER
	RET

// func logRowSumAVX512(dst, src, q *float64, rows, m int, t *float64) int
//
// The prior's penalty (penaltyLogs, prior.go) over rows of m entries, m a
// positive multiple of 8: dst = log(src) as logsAVX512 takes it, and with
// q nil *t += each logarithm in order (a block of D), else per row j
// *t += q[j]·x with x the row's logarithms added in order from 0 (a block
// of K^T): the sum's additions one after another, as the scalar loop's,
// which run beside the logarithms of the rows that follow. It stops
// before a row with an entry that is zero, negative, infinite or NaN
// and returns the number of rows done.
TEXT ·logRowSumAVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ q+16(FP), R10
	MOVQ rows+24(FP), CX
	MOVQ m+32(FP), DX
	MOVQ t+40(FP), R11
	VMOVSD (R11), X20
	VPBROADCASTQ logc<>+0x00(SB), Z16 // mantissa
	VPBROADCASTQ logc<>+0x08(SB), Z17 // 0.5
	VPBROADCASTQ logc<>+0x10(SB), Z18 // 0x7FF
	VPBROADCASTQ logc<>+0x18(SB), Z19 // 0x3FE
	VPXORQ Z22, Z22, Z22
	XORQ R12, R12
lrrow:
	CMPQ R12, CX
	JGE lrdone
	// The row's entries are all ordinary, or the row is left to the caller.
	XORQ AX, AX
lrcheck:
	VMOVUPD (SI)(AX*8), Z0
	VPSRLQ $52, Z0, Z1
	VPANDQ Z18, Z1, Z1
	VPCMPQ $4, Z18, Z1, K1
	VPCMPGTQ Z22, Z0, K2
	KANDB K2, K1, K1
	KMOVB K1, BX
	CMPL BX, $0xFF
	JNE lrdone
	ADDQ $8, AX
	CMPQ AX, DX
	JLT lrcheck
	VXORPD X21, X21, X21 // x = 0
	XORQ AX, AX
lrgroup:
	VMOVUPD (SI)(AX*8), Z0
	VPSRLQ $52, Z0, Z1
	VPANDQ Z18, Z1, Z1
	LOG512
	VMOVUPD Z1, (DI)(AX*8)
	TESTQ R10, R10
	JZ lrd
	VADDSD 0(DI)(AX*8), X21, X21
	VADDSD 8(DI)(AX*8), X21, X21
	VADDSD 16(DI)(AX*8), X21, X21
	VADDSD 24(DI)(AX*8), X21, X21
	VADDSD 32(DI)(AX*8), X21, X21
	VADDSD 40(DI)(AX*8), X21, X21
	VADDSD 48(DI)(AX*8), X21, X21
	VADDSD 56(DI)(AX*8), X21, X21
	JMP lrnext
lrd:
	VADDSD 0(DI)(AX*8), X20, X20
	VADDSD 8(DI)(AX*8), X20, X20
	VADDSD 16(DI)(AX*8), X20, X20
	VADDSD 24(DI)(AX*8), X20, X20
	VADDSD 32(DI)(AX*8), X20, X20
	VADDSD 40(DI)(AX*8), X20, X20
	VADDSD 48(DI)(AX*8), X20, X20
	VADDSD 56(DI)(AX*8), X20, X20
lrnext:
	ADDQ $8, AX
	CMPQ AX, DX
	JLT lrgroup
	TESTQ R10, R10
	JZ lrrowdone
	VMULSD (R10), X21, X21
	VADDSD X21, X20, X20
	ADDQ $8, R10
lrrowdone:
	LEAQ (SI)(DX*8), SI
	LEAQ (DI)(DX*8), DI
	INCQ R12
	JMP lrrow
lrdone:
	VMOVSD X20, (R11)
	MOVQ R12, ret+48(FP)
	VZEROUPPER
	RET

// func lengthSumsAVX512(a0, a1, a2 *float64, n int, sums *float64)
//
// squaremLength's sums (accel.go) over n entries, n a positive multiple
// of 8: with r = a1 − a0 and v = (a2 − 2·a1) + a0 per entry (2·a1 as
// a1 + a1, exact), sums[0] += r·r and sums[1] += v·v entry after entry
// in order, the two chains of additions side by side.
TEXT ·lengthSumsAVX512(SB), NOSPLIT, $0-40
	MOVQ a0+0(FP), R8
	MOVQ a1+8(FP), R9
	MOVQ a2+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ sums+32(FP), R11
	VMOVSD 0(R11), X20
	VMOVSD 8(R11), X21
	XORQ AX, AX
lsgroup:
	VMOVUPD (R8)(AX*8), Z0
	VMOVUPD (R9)(AX*8), Z1
	VSUBPD Z0, Z1, Z2 // r = a1 − a0
	VADDPD Z1, Z1, Z3 // 2·a1
	VMOVUPD (R10)(AX*8), Z4
	VSUBPD Z3, Z4, Z3 // a2 − 2·a1
	VADDPD Z0, Z3, Z3 // v
	VMULPD Z2, Z2, Z2
	VMULPD Z3, Z3, Z3
	// Lanes out in order: 0, 1 from the low 128 bits, and so on.
	VPERMILPD $1, X2, X5
	VPERMILPD $1, X3, X6
	VADDSD X2, X20, X20
	VADDSD X3, X21, X21
	VADDSD X5, X20, X20
	VADDSD X6, X21, X21
	VEXTRACTF64X2 $1, Z2, X7
	VEXTRACTF64X2 $1, Z3, X8
	VPERMILPD $1, X7, X5
	VPERMILPD $1, X8, X6
	VADDSD X7, X20, X20
	VADDSD X8, X21, X21
	VADDSD X5, X20, X20
	VADDSD X6, X21, X21
	VEXTRACTF64X2 $2, Z2, X7
	VEXTRACTF64X2 $2, Z3, X8
	VPERMILPD $1, X7, X5
	VPERMILPD $1, X8, X6
	VADDSD X7, X20, X20
	VADDSD X8, X21, X21
	VADDSD X5, X20, X20
	VADDSD X6, X21, X21
	VEXTRACTF64X2 $3, Z2, X7
	VEXTRACTF64X2 $3, Z3, X8
	VPERMILPD $1, X7, X5
	VPERMILPD $1, X8, X6
	VADDSD X7, X20, X20
	VADDSD X8, X21, X21
	VADDSD X5, X20, X20
	VADDSD X6, X21, X21
	ADDQ $8, AX
	CMPQ AX, CX
	JLT lsgroup
	VMOVSD X20, 0(R11)
	VMOVSD X21, 8(R11)
	VZEROUPPER
	RET
