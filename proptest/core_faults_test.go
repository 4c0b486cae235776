package proptest

// The state machine with faults injected into the simulated device. Two
// kinds: a chosen fault carried by a step (the nth call of one operation
// during that step fails, or returns null with success), and random failures
// of every listed operation over a whole sequence (sim.FailRate).
//
// After a failed step the checks are the same as after any other step, made
// by runner.do and runner.checkGlobal: the error is a *core.Error of kind
// driver carrying the injected code; the model is unchanged except that a
// failed synchronous upload's destination bytes become unknown (some copies
// may have landed before the failure); MemoryStats().Allocated, telemetry and
// caller-owned outputs are unchanged; the device holds exactly the Backend's
// buffers, pooled memory, idle streams and events (nothing leaked); and the
// Backend keeps working for the steps that follow. Every sequence ends with
// Close and an empty device.

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// randomFaultOps are the operations FailRate fails in the random mode: all
// of faultOps. With random failures two can hit one call, so a failed
// transfer's drain (one more StreamSynchronize) may fail too; core then
// quarantines the stream and what its queued work may use
// (core/quarantine.go), and runner.checkGlobal accounts for it (quarModel).
func randomFaultOps() []sim.Op { return faultOps }

// drawFault draws one chosen fault: an operation from faultOps (or MemFree,
// which runner.permitFault arms only for Free of an unpooled
// buffer), which of its calls during the step fails, and how.
func drawFault(src entropy) *faultSpec {
	ops := append(append([]sim.Op(nil), faultOps...), sim.OpMemFree)
	f := &faultSpec{op: ops[src.intn(len(ops))], nth: 1 + src.intn(3)}
	if f.nth > 1 && chance(src, 50) {
		f.nth = 1
	}
	for _, op := range nullOps {
		if op == f.op && chance(src, 30) {
			f.null = true
			return f
		}
	}
	switch f.op {
	case sim.OpMemAlloc, sim.OpHostAlloc:
		f.code = cudaapi.CUDA_ERROR_OUT_OF_MEMORY
	default:
		codes := []cudaapi.Result{cudaapi.CUDA_ERROR_UNKNOWN, cudaapi.CUDA_ERROR_LAUNCH_FAILED,
			cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, cudaapi.CUDA_ERROR_INVALID_VALUE}
		f.code = codes[src.intn(len(codes))]
	}
	return f
}

// TestCoreStateMachineFaults runs the state machine with a chosen fault on
// about a third of the steps.
func TestCoreStateMachineFaults(t *testing.T) {
	kinds := allKinds
	kinds.faults = true
	runCoreProperty(t, faultsChosen, kinds, propSize{80, 60}, propSize{3000, 200})
}

// TestCoreStateMachineRandomFaults runs the state machine while every listed
// driver operation fails at a random rate (2% to 15%).
func TestCoreStateMachineRandomFaults(t *testing.T) {
	runCoreProperty(t, faultsRandom, allKinds, propSize{100, 80}, propSize{2000, 200})
}

// TestCoreFailedDrainLeaksNothing: a transfer whose copy or fence fails is
// drained with one more StreamSynchronize (Backend.syncOrQuarantine) before
// its staging goes back to the pool. When that drain fails as well, the
// caller gives the lease back unhealthy and the launch pool destroys
// the stream with the copy still queued: the simulated device refuses
// (CUDA_ERROR_ILLEGAL_STATE, logged), so the stream leaks past Close, which
// returns nil, with its copy queued; and the staging block that copy reads
// has already gone back to the pinned pool for reuse (on a real device the
// destroy succeeds but the DMA may still read recycled staging). Every
// caller of drain had the pattern: queueUploads, gather, the packed and
// pipelined paths, enqueue (batch.go), Pending.fail and
// UploadAsync. Found by TestCoreStateMachineRandomFaults; core now
// quarantines such a stream with everything its work may use
// (core/quarantine.go) and releases it once a retried synchronization
// succeeds, at the latest in Close.
func TestCoreFailedDrainLeaksNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(*sim.Device)
		call func(*core.Backend, core.Buffer) error
	}{
		{"upload fence and drain fail", func(d *sim.Device) {
			d.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			d.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
		}, func(b *core.Backend, h core.Buffer) error {
			return b.Upload(core.UploadAt{Buf: h, Data: make([]byte, h.Len)})
		}},
		{"second upload copy and drain fail", func(d *sim.Device) {
			d.FailNth(sim.OpMemcpyHtoDAsync, 2, cudaapi.CUDA_ERROR_UNKNOWN)
			d.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		}, func(b *core.Backend, h core.Buffer) error {
			return b.Upload(core.UploadAt{Buf: h, Data: []byte{1}}, core.UploadAt{Buf: h, Offset: 8, Data: []byte{2}})
		}},
		{"readback fence and drain fail", func(d *sim.Device) {
			d.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			d.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
		}, func(b *core.Backend, h core.Buffer) error { _, err := b.Download(h.All(), nil); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := sim.New(sim.Config{TotalMemory: 32 << 20})
			b, err := core.Open(dev)
			require.NoError(t, err)
			h, err := b.Alloc(64)
			require.NoError(t, err)
			tc.arm(dev)
			err = tc.call(b, h)
			dev.ClearFaults()
			require.True(t, errors.Is(err, core.ErrDriver), "the call must fail: %v", err)
			require.NoError(t, b.Close())
			assert.True(t, dev.Live().Zero(), "after Close: %s", dev.Live())
		})
	}
}
