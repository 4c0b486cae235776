#include "textflag.h"

// func copyNT(dst, src *byte, n int)
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVOU	0(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVNTO	X0, 0(DI)
	MOVNTO	X1, 16(DI)
	MOVNTO	X2, 32(DI)
	MOVNTO	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET

// func sfence()
TEXT ·sfence(SB), NOSPLIT, $0-0
	SFENCE
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL	leaf+0(FP), AX
	MOVL	sub+4(FP), CX
	CPUID
	MOVL	AX, eax+8(FP)
	MOVL	BX, ebx+12(FP)
	MOVL	CX, ecx+16(FP)
	MOVL	DX, edx+20(FP)
	RET

// func evictLines(p *byte, back, lines int, opt bool)
TEXT ·evictLines(SB), NOSPLIT, $0-25
	MOVQ	p+0(FP), DI
	SUBQ	back+8(FP), DI
	MOVQ	lines+16(FP), CX
	TESTQ	CX, CX
	JZ	evdone
	MOVBLZX	opt+24(FP), AX
	TESTL	AX, AX
	JZ	evplain
evopt:
	CLFLUSHOPT	(DI)
	ADDQ	$64, DI
	DECQ	CX
	JNZ	evopt
	RET
evplain:
	CLFLUSH	(DI)
	ADDQ	$64, DI
	DECQ	CX
	JNZ	evplain
evdone:
	RET
