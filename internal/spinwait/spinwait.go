// Package spinwait holds the one instruction a polling loop should run on
// every poll: a hint that the thread is spinning (PAUSE on amd64), which
// stops it from flooding the pipeline with speculative loads and leaves a
// core's other hardware thread its share of the core. A polling goroutine
// without it slows whatever runs on its sibling thread, such as the
// goroutine whose work it waits for.
package spinwait
