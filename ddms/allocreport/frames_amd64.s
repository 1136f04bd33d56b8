//go:build !purego

#include "textflag.h"

// func checkFrames(base *byte, allocs []Allocation, lim *[8]uint16) int
//
// For each Allocation (16 bytes: Depth at 8, off at 12), the frames at
// base+off are read 16 bytes (two frames) at a time. The big-endian 16-bit
// fields are swapped into lanes, and a saturating subtract of the limits
// leaves a lane non-zero only where an index is above its limit (the line's
// limit is 0xffff). The results of an entry are ORed and tested once.
TEXT ·checkFrames(SB), NOSPLIT, $0-48
	MOVQ	base+0(FP), SI
	MOVQ	allocs_base+8(FP), DI
	MOVQ	allocs_len+16(FP), CX
	MOVQ	lim+32(FP), AX
	MOVOU	(AX), X7
	PXOR	X6, X6
	XORQ	BX, BX

entry:
	CMPQ	BX, CX
	JGE	none
	MOVBQZX	8(DI), DX
	MOVLQZX	12(DI), R8
	ADDQ	SI, R8
	PXOR	X0, X0

four:
	CMPQ	DX, $4
	JLT	two
	MOVOU	(R8), X1
	MOVOU	16(R8), X3
	MOVO	X1, X2
	MOVO	X3, X4
	PSLLW	$8, X1
	PSRLW	$8, X2
	PSLLW	$8, X3
	PSRLW	$8, X4
	POR	X2, X1
	POR	X4, X3
	PSUBUSW	X7, X1
	PSUBUSW	X7, X3
	POR	X1, X0
	POR	X3, X0
	ADDQ	$32, R8
	SUBQ	$4, DX
	JMP	four

two:
	CMPQ	DX, $2
	JLT	one
	MOVOU	(R8), X1
	MOVO	X1, X2
	PSLLW	$8, X1
	PSRLW	$8, X2
	POR	X2, X1
	PSUBUSW	X7, X1
	POR	X1, X0
	ADDQ	$16, R8
	SUBQ	$2, DX

one:
	TESTQ	DX, DX
	JZ	check
	MOVQ	(R8), X1
	MOVO	X1, X2
	PSLLW	$8, X1
	PSRLW	$8, X2
	POR	X2, X1
	PSUBUSW	X7, X1
	POR	X1, X0

check:
	PCMPEQW	X6, X0
	PMOVMSKB	X0, R9
	CMPL	R9, $0xffff
	JNE	bad
	ADDQ	$16, DI
	INCQ	BX
	JMP	entry

bad:
	MOVQ	BX, ret+40(FP)
	RET

none:
	MOVQ	$-1, ret+40(FP)
	RET
