//go:build amd64 && !purego

#include "textflag.h"

// func prefetch2(a, b unsafe.Pointer, n int)
// Issues PREFETCHT0 for every cache line of [a, a+n) and [b, b+n).
TEXT ·prefetch2(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JLE done
	LEAQ -1(AX)(CX*1), DX
	LEAQ -1(BX)(CX*1), SI
loop:
	PREFETCHT0 (AX)
	PREFETCHT0 (BX)
	ADDQ $64, AX
	ADDQ $64, BX
	SUBQ $64, CX
	JG loop
	PREFETCHT0 (DX)
	PREFETCHT0 (SI)
done:
	RET
