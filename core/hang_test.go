package core_test

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// hangLimit bounds how long a test waits for calls that would hang for good
// if a rank waited for another that never takes part: such a test fails
// after hangLimit with a message saying what it waited for, instead of at
// the test binary's timeout.
const hangLimit = 30 * time.Second

// waitRanks waits for wg (the goroutines of a test's ranks) and, when they
// take longer than hangLimit, stops the test binary with a panic naming the
// test and what it waited for. t.Fatal would not do: the test's cleanup
// closes the Backends, and Close waits for the hung calls, so the binary
// would still hang; a panic on another goroutine ends it at once, with
// every goroutine's stack.
func waitRanks(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangLimit):
		msg := fmt.Sprintf("%s: %s did not return within %s: a rank is waiting for one that will never take part (a missing abort?)",
			t.Name(), what, hangLimit)
		t.Error(msg)
		go func() { panic(msg) }()
		select {} // the panic ends the binary
	}
}
