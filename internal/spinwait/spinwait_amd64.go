package spinwait

// Pause executes one PAUSE instruction.
func Pause()
