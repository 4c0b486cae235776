#include "textflag.h"

// func CPUPause()
TEXT ·CPUPause(SB), NOSPLIT|NOFRAME, $0-0
	PAUSE
	RET
