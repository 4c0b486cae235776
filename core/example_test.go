package core_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// le32 packs uint32 values as little-endian bytes, the layout the built-in
// programs use.
func le32(v ...uint32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], x)
	}
	return out
}

// Example_batch allocates resident buffers, then uploads, adds on the
// device and reads back in one Batch with one fence. core.AsBytes passes
// the typed slices as bytes without copying them: the sum lands in sum's
// own storage.
func Example_batch() {
	b, err := core.Open(sim.New(sim.Config{})) // on a GPU: core.OpenCUDA(0)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	x, y, sum := []uint32{1, 2, 3, 4}, []uint32{10, 20, 30, 40}, make([]uint32, 4)
	var bufs [3]core.Buffer // x, y and sum on the device
	for i := range bufs {
		if bufs[i], err = core.AllocSlice[uint32](b, len(x)); err != nil {
			log.Fatal(err)
		}
	}
	// One batch, one fence: upload both inputs, add them on the device, read the sum.
	_, err = b.Run(core.Batch{
		Uploads: []core.UploadAt{{Buf: bufs[0], Data: core.AsBytes(x)}, {Buf: bufs[1], Data: core.AsBytes(y)}},
		Steps:   []core.Step{{Program: core.ProgramVAddU32(), Bufs: bufs[:]}},
		Reads:   []core.Range{bufs[2].All()},
	}, [][]byte{core.AsBytes(sum)[:0]})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sum:", sum, "fences:", b.Telemetry().SyncPoints)
	for _, h := range bufs {
		if err := b.Free(h); err != nil {
			log.Fatal(err)
		}
	}
	// Output: sum: [11 22 33 44] fences: 1
}

// ExampleBackend_Run runs a multi-step kernel sequence as one Batch: the
// clear and fill are device memsets (no host bytes), each step sees what the
// one before it wrote, and the host waits once, at the end.
func ExampleBackend_Run() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	var bufs [4]core.Buffer
	for i := range bufs {
		if bufs[i], err = b.Alloc(4 * 4); err != nil {
			log.Fatal(err)
		}
		defer b.Free(bufs[i])
	}
	a, c, t, out := bufs[0], bufs[1], bufs[2], bufs[3]
	parts, err := b.Run(core.Batch{
		Clears:  []core.Buffer{out},
		Uploads: []core.UploadAt{{Buf: a, Data: le32(1, 2, 3, 4)}},
		Steps: []core.Step{
			{Program: core.ProgramFillU32(), Bufs: []core.Buffer{c}, Config: core.DispatchConfig{Scalars: []uint32{100}}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{a, c, t}},   // t = a + 100
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{t, t, out}}, // out = 2t
		},
		// Two touching ranges of out: fused into one device-to-host copy.
		Reads: []core.Range{out.Slice(0, 8), out.Slice(8, 8)},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	var got []uint32
	for _, part := range parts {
		got = append(got, binary.LittleEndian.Uint32(part), binary.LittleEndian.Uint32(part[4:]))
	}
	tel := b.Telemetry()
	fmt.Println(got)
	fmt.Printf("launches %d, memsets %d, copies %d requested and %d after fusion, fences %d\n",
		tel.KernelLaunches, tel.MemsetOps, tel.RequestedCopies, tel.DeviceCopies, tel.SyncPoints)
	// Output:
	// [202 204 206 208]
	// launches 3, memsets 1, copies 3 requested and 2 after fusion, fences 1
}

// ExampleNewOptimizerDispatcher shows the optimizer's two caches: freed
// buffers are pooled by exact size and handed out again without a driver
// allocation, and static uploads are content-addressed, so acquiring the same
// payload again uploads nothing.
func ExampleNewOptimizerDispatcher() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	d, err := core.NewOptimizerDispatcher(b)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	// The pool: free, then allocate the same size again.
	h, err := d.Alloc(1 << 10)
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Free(h); err != nil {
		log.Fatal(err)
	}
	before := b.MemoryStats().Allocated
	if h, err = d.Alloc(1 << 10); err != nil {
		log.Fatal(err)
	}
	fmt.Println("pool hit, new device bytes:", b.MemoryStats().Allocated-before)
	defer d.Free(h)

	// The static cache: a cold acquisition uploads, a warm one does not.
	const domain = 42 // separates this caller's payloads from anyone else's
	table := le32(3, 1, 4, 1, 5, 9, 2, 6)
	for i := 1; i <= 2; i++ {
		up := b.Telemetry().HostToDeviceBytes
		set, err := d.AcquireStaticUploads(domain, [][]byte{table})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("acquire %d: cache hit %v, uploaded %d bytes\n", i, set.CacheHit, b.Telemetry().HostToDeviceBytes-up)
		if err := d.ReleaseStaticUploads(set); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// pool hit, new device bytes: 0
	// acquire 1: cache hit false, uploaded 32 bytes
	// acquire 2: cache hit true, uploaded 0 bytes
}

// exampleAdd is the kind of user code a test checks on the simulated
// device: it uploads two vectors, adds them with one fence and frees what it
// allocated, on every path.
func exampleAdd(b *core.Backend, x, y []byte) (sum []byte, err error) {
	var bufs []core.Buffer
	defer func() {
		for _, h := range bufs {
			err = errors.Join(err, b.Free(h))
		}
	}()
	for range 3 {
		h, err := b.Alloc(len(x))
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, h)
	}
	out, err := b.Run(core.Batch{
		Uploads: []core.UploadAt{{Buf: bufs[0], Data: x}, {Buf: bufs[1], Data: y}},
		Steps:   []core.Step{{Program: core.ProgramVAddU32(), Bufs: bufs}},
		Reads:   []core.Range{{Buf: bufs[2], Len: len(x)}},
	}, nil)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Example_testWithSim tests GPU code without a GPU: the simulated device runs
// the built-in kernels' Go twins on real bytes, fails the operation you name
// with the CUDA result you choose, and reports what is still alive, so a
// test checks results, failure paths and leaks. In a test, end with
// t.Cleanup(func() { sim.CloseChecked(t, b, dev) }) instead of printing:
// it fails on buffers still live before Close (a forgotten Free,
// which Close would free silently), on a failed Close and on anything left
// on the device.
func Example_testWithSim() {
	dev := sim.New(sim.Config{TotalMemory: 64 << 20})
	b, err := core.Open(dev)
	if err != nil {
		log.Fatal(err)
	}

	sum, err := exampleAdd(b, le32(1, 2), le32(40, 40))
	fmt.Println("sum:", binary.LittleEndian.Uint32(sum), binary.LittleEndian.Uint32(sum[4:]), err)

	// The launch fails as a real driver would report it; the code under test
	// must return the error and still free its buffers.
	dev.FailNth(sim.OpLaunch, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err = exampleAdd(b, le32(1, 2), le32(40, 40))
	fmt.Println("driver failure:", errors.Is(err, core.ErrDriver), errors.Is(err, cudaapi.CUDA_ERROR_LAUNCH_FAILED))
	fmt.Println("resident bytes after the failure:", b.MemoryStats().Allocated)
	// Disarm faults that did not fire: an armed one would fail a later call,
	// Close included.
	dev.ClearFaults()

	live, _ := b.LiveResidentBuffers() // checked before Close, which frees everything
	fmt.Println("live buffers before Close:", live)
	if err := b.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leak-free after Close:", dev.Live().Zero())
	// Output:
	// sum: 41 42 <nil>
	// driver failure: true true
	// resident bytes after the failure: 0
	// live buffers before Close: 0
	// leak-free after Close: true
}
