package proptest

// The environment of one pinned-batch case (core_batchpinned_test.go): its
// Backend on the simulated device, buffers, host memory and destinations.

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"runtime"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// pinDest is the memory of one destination (Into, or a dst slot's
// capacity).
type pinDest struct {
	mem pinMem
	b   []byte
}

// pinEnv is one case's Backend, buffers and host memory.
type pinEnv struct {
	c    *pinCase
	r    *rand.Rand
	b    *core.Backend
	dev  *sim.Device
	hs   []core.Buffer
	init [][]byte
	p    *core.PinnedBuffer
	reg  []byte
	used [2]int // bytes taken from p and reg
	// landed counts the runs whose read landed in chunks (check).
	landed int

	batch core.Batch
	data  [][]byte  // each upload's Data
	slots [][]byte  // the dst slots, as first made
	dests []pinDest // every destination's whole capacity, refilled before each run
	// inAlloc and inReg: some direct copy uses the pinned buffer, the
	// registered range.
	inAlloc, inReg bool
}

const pinHostBytes = 8 << 10

func newPinEnv(c *pinCase) (*pinEnv, error) {
	e := &pinEnv{c: c, r: rand.New(rand.NewSource(c.seed)), dev: sim.New(sim.Config{TotalMemory: 64 << 20})}
	opts := append([]core.Option{core.WithAtomicReadbacks(c.atomic), core.WithLogger(slog.New(&logCounter{}))}, pinTunings[c.tuning]...)
	var err error
	if e.b, err = core.Open(e.dev, opts...); err != nil {
		return nil, err
	}
	for _, n := range c.lens {
		h, err := e.b.Alloc(n)
		if err != nil {
			return e, err
		}
		e.hs = append(e.hs, h)
		e.init = append(e.init, randomXferBytes(e.r, n))
	}
	if e.p, err = e.b.AllocHostPinned(pinHostBytes); err != nil {
		return e, err
	}
	e.reg = make([]byte, pinHostBytes)
	if err := e.b.PinHostBuffer(unsafe.Pointer(&e.reg[0]), len(e.reg)); err != nil {
		e.reg = nil
		return e, err
	}
	return e, e.reset()
}

// take returns n bytes (capacity n+room) of host memory in m, apart from
// every other take.
func (e *pinEnv) take(m pinMem, n, room int) []byte {
	switch m {
	case memAlloc, memReg:
		k := int(m - memAlloc)
		src := e.p.Bytes()
		if m == memReg {
			src = e.reg
		}
		if e.c.tuning == pinKernelReads {
			e.used[k] = (e.used[k] + 3) &^ 3 // word-aligned, so reads can qualify for a copy kernel
		}
		s := src[e.used[k] : e.used[k]+n : e.used[k]+n+room]
		e.used[k] += n + room
		return s
	}
	return make([]byte, n, n+room)
}

// build makes the batch, its upload data and its destinations.
func (e *pinEnv) build() {
	c := e.c
	for _, f := range c.fills {
		e.batch.Fills = append(e.batch.Fills, core.Fill{Buf: e.hs[f.buf], Value: byte(f.value)})
	}
	dUp := c.directUps()
	for i, u := range c.ups {
		d := e.take(u.src, u.n, 0)
		e.r.Read(d)
		e.data = append(e.data, d)
		e.batch.Uploads = append(e.batch.Uploads, core.UploadAt{Buf: e.hs[u.buf], Offset: u.off, Data: d})
		e.note(dUp[i], u.src)
	}
	for _, x := range c.xors {
		e.batch.Steps = append(e.batch.Steps, core.Step{Program: xorProgram, Bufs: []core.Buffer{e.hs[x.buf]},
			Config: core.DispatchConfig{Scalars: []uint32{x.value}}})
	}
	dRd := c.directReads(c.form)
	for i, d := range c.reads {
		e.batch.Reads = append(e.batch.Reads, core.Range{Buf: e.hs[d.buf], Offset: d.off, Len: d.n})
		if c.into {
			var into []byte
			if d.into != memNone {
				into = e.take(d.into, d.n, 0)
				e.dests = append(e.dests, pinDest{d.into, into})
			}
			e.batch.Into = append(e.batch.Into, into)
			if d.into != memNone {
				e.note(dRd[i], d.into)
			}
		}
		var slot []byte
		if d.slot != memNone {
			n := d.n
			if d.short {
				n = max(d.n-1, 0)
			}
			slot = e.take(d.slot, 0, n)
			e.dests = append(e.dests, pinDest{d.slot, slot[:n]})
			if d.into == memNone {
				e.note(dRd[i], d.slot)
			}
		}
		e.slots = append(e.slots, slot)
	}
}

func (e *pinEnv) note(direct bool, m pinMem) {
	e.inAlloc = e.inAlloc || direct && m == memAlloc
	e.inReg = e.inReg || direct && m == memReg
}

// reset writes the initial bytes straight into the buffers' device
// memory (no call of the Backend, whose pools stay as they are), fills
// every destination with a marker and zeroes the telemetry.
func (e *pinEnv) reset() error {
	for i, h := range e.hs {
		ptr, err := e.b.ResidentDevicePtr(h)
		if err != nil {
			return err
		}
		if err := e.dev.WriteDevice(ptr, e.init[i]); err != nil {
			return err
		}
	}
	for _, d := range e.dests {
		for k := range d.b {
			d.b[k] = 0xee
		}
	}
	e.b.ResetTelemetry()
	return nil
}

// dst returns a fresh dst holding the slots as first made.
func (e *pinEnv) dst() [][]byte { return append([][]byte(nil), e.slots...) }

// busy checks that the pinned memory direct copies use refuses to go.
func (e *pinEnv) busy(what string) error {
	if e.inAlloc {
		if err := e.p.Free(); !errors.Is(err, core.ErrInFlight) {
			return fmt.Errorf("%s: PinnedBuffer.Free of memory a direct copy uses: %v, want ErrInFlight", what, err)
		}
	}
	if e.inReg {
		if err := e.b.UnpinHostBuffer(unsafe.Pointer(&e.reg[0])); !errors.Is(err, core.ErrInFlight) {
			return fmt.Errorf("%s: UnpinHostBuffer of memory a direct copy uses: %v, want ErrInFlight", what, err)
		}
	}
	return nil
}

// close releases the pinned memory (which nothing may still hold), the
// buffers and the Backend, and checks that nothing is left on the device.
func (e *pinEnv) close() error {
	var errs []error
	if e.p != nil {
		errs = append(errs, wrapErr("PinnedBuffer.Free after collection", e.p.Free()))
	}
	if e.reg != nil {
		errs = append(errs, wrapErr("UnpinHostBuffer after collection", e.b.UnpinHostBuffer(unsafe.Pointer(&e.reg[0]))))
		runtime.KeepAlive(e.reg)
	}
	for _, h := range e.hs {
		errs = append(errs, wrapErr("Free", e.b.Free(h)))
	}
	e.dev.ClearFaults()
	errs = append(errs, wrapErr("Close", e.b.Close()))
	if l := e.dev.Live(); !l.Zero() {
		errs = append(errs, fmt.Errorf("device holds %s after Close", l))
	}
	return errors.Join(errs...)
}

func wrapErr(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
