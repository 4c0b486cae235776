package main

import (
	"fmt"
	"io"
	"os"
)

// progress reports bench's progress on stderr: on a terminal one line
// rewritten in place with the run count, elsewhere (logs, CI, tests) one
// plain line per workload.
type progress struct {
	w     io.Writer
	tty   bool
	label string
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w)}
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// start announces step i of n.
func (p *progress) start(i, n int, what string) {
	p.label = fmt.Sprintf("[%d/%d] %s", i, n, what)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.label)
		return
	}
	fmt.Fprintf(p.w, "bench: %s\n", p.label)
}

// tick shows measured run i of n (terminal only).
func (p *progress) tick(i, n int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s: run %d/%d", p.label, i, n)
	}
}

// done clears the progress line.
func (p *progress) done() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
