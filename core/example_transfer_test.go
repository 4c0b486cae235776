package core_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// openExample opens a Backend on a simulated device, as the examples do;
// on a GPU, core.OpenCUDA(0) takes its place.
func openExample() *core.Backend {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	return b
}

// must stops an example at its first error.
func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// ExampleBackend_Alloc allocates a device buffer, uses it, and frees it;
// after Free its handle is refused by every call.
func ExampleBackend_Alloc() {
	b := openExample()
	defer b.Close()

	h, err := b.Alloc(1 << 20) // 1 MiB, contents unspecified until written
	must(err)
	must(b.Upload(core.UploadAt{Buf: h, Data: []byte("first bytes")}))
	fmt.Println("buffer of", h.Len, "bytes, in use:", b.MemoryStats().Allocated)

	must(b.Free(h))
	_, err = b.Download(h.Slice(0, 11), nil)
	fmt.Println("after Free:", errors.Is(err, core.ErrUnknownHandle), "in use:", b.MemoryStats().Allocated)
	// Output:
	// buffer of 1048576 bytes, in use: 1048576
	// after Free: true in use: 0
}

// ExampleBackend_Upload writes several buffers, and parts of them, with
// one fence for the whole call; where writes overlap, the later one wins.
func ExampleBackend_Upload() {
	b := openExample()
	defer b.Close()
	greeting, err := b.Alloc(5)
	must(err)
	defer b.Free(greeting)
	target, err := b.Alloc(6)
	must(err)
	defer b.Free(target)

	must(b.Upload(
		core.UploadAt{Buf: greeting, Data: []byte("hello")},
		core.UploadAt{Buf: target, Data: []byte("device")},
		core.UploadAt{Buf: target, Offset: 3, Data: []byte("ICE")}, // later writes win
	))
	out, err := b.DownloadMany([]core.Range{greeting.All(), target.All()}, nil)
	must(err)
	fmt.Printf("%s %s, fences: %d\n", out[0], out[1], b.Telemetry().SyncPoints)

	// A write that does not fit is refused before any byte moves.
	err = b.Upload(core.UploadAt{Buf: greeting, Offset: 3, Data: []byte("lo!")})
	fmt.Println("refused:", errors.Is(err, core.ErrInvalidArgument))
	// Output:
	// hello devICE, fences: 2
	// refused: true
}

// ExampleBackend_Download reads a buffer whole, a range of it, and again
// into storage the caller keeps, as append does: the returned slice reuses
// dst's storage when it is large enough.
func ExampleBackend_Download() {
	b := openExample()
	defer b.Close()
	h, err := b.Alloc(8)
	must(err)
	defer b.Free(h)
	must(b.Upload(core.UploadAt{Buf: h, Data: []byte("abcdefgh")}))

	whole, err := b.Download(h.All(), nil) // a new slice
	must(err)
	part, err := b.Download(h.Slice(2, 3), nil)
	must(err)
	fmt.Printf("%s %s\n", whole, part)

	buf := make([]byte, 0, 64) // reused by every read
	for _, r := range []core.Range{h.Slice(0, 4), h.Slice(4, 4)} {
		if buf, err = b.Download(r, buf); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (cap %d) ", buf, cap(buf))
	}
	fmt.Println()
	// Output:
	// abcdefgh cde
	// abcd (cap 64) efgh (cap 64)
}

// ExampleBackend_DownloadMany reads ranges of several buffers with one
// fence. With a nil dst every result is a new slice; passing the previous
// result back reuses its storage, which a loop should do.
func ExampleBackend_DownloadMany() {
	b := openExample()
	defer b.Close()
	x, err := b.Alloc(4)
	must(err)
	defer b.Free(x)
	y, err := b.Alloc(6)
	must(err)
	defer b.Free(y)
	must(b.Upload(core.UploadAt{Buf: x, Data: []byte("wxyz")}, core.UploadAt{Buf: y, Data: []byte("abcdef")}))

	rs := []core.Range{x.All(), y.Slice(1, 2), y.Slice(3, 3)} // y's two ranges touch: one copy
	var out [][]byte
	for round := 1; round <= 2; round++ {
		if out, err = b.DownloadMany(rs, out); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("round %d: %s %s %s\n", round, out[0], out[1], out[2])
	}
	t := b.Telemetry()
	fmt.Println("readbacks:", t.ReadbackOps, "fences:", t.SyncPoints-1) // less the upload's
	// Output:
	// round 1: wxyz bc def
	// round 2: wxyz bc def
	// readbacks: 2 fences: 2
}

// ExampleBuffer_Slice names parts of a buffer: a Range for reads, checked
// when a call uses it, and the Offset of an UploadAt for writes.
func ExampleBuffer_Slice() {
	b := openExample()
	defer b.Close()
	h, err := b.Alloc(10)
	must(err)
	defer b.Free(h)
	must(b.Upload(core.UploadAt{Buf: h, Data: []byte("0123456789")}))
	must(b.Upload(core.UploadAt{Buf: h, Offset: 4, Data: []byte("--")}))

	head, tail := h.Slice(0, 5), h.Slice(5, 5)
	out, err := b.DownloadMany([]core.Range{head, tail, h.All()}, nil)
	must(err)
	fmt.Printf("%s|%s|%s\n", out[0], out[1], out[2])

	_, err = b.Download(h.Slice(8, 4), nil) // runs past the end
	fmt.Println("refused:", errors.Is(err, core.ErrInvalidArgument))
	// Output:
	// 0123-|-6789|0123--6789
	// refused: true
}

// ExampleBackend_UploadAsync queues copies from pinned memory without
// waiting, then waits for all of them at once.
func ExampleBackend_UploadAsync() {
	b := openExample()
	defer b.Close()
	h, err := b.Alloc(16)
	must(err)
	defer b.Free(h)
	pinned, err := b.AllocHostPinned(16)
	must(err)
	defer pinned.Free()

	src := pinned.Bytes() // the device reads it in place: leave it alone until synchronized
	copy(src, "pinned, then DMA")
	must(b.UploadAsync(core.UploadAt{Buf: h, Data: src[:8]}, core.UploadAt{Buf: h, Offset: 8, Data: src[8:]}))
	fmt.Println("free while queued refused:", errors.Is(b.Free(h), core.ErrInFlight))
	must(b.SynchronizeUploads())

	got, err := b.Download(h.All(), nil)
	must(err)
	fmt.Printf("%s\n", got)
	// Output:
	// free while queued refused: true
	// pinned, then DMA
}

// ExampleBackend_Dispatch launches a built-in program twice, once with
// its buffers and u32 scalars, once with the same arguments typed.
func ExampleBackend_Dispatch() {
	b := openExample()
	defer b.Close()
	h, err := b.Alloc(4 * 4) // four uint32 words
	must(err)
	defer b.Free(h)
	fill := core.ProgramFillU32()
	fmt.Println("fill takes", fill.Params())

	must(b.Dispatch(fill, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{7}}))
	out, err := b.Download(h.Slice(0, 4), nil)
	must(err)
	fmt.Println("first word:", binary.LittleEndian.Uint32(out))

	must(b.Dispatch(fill, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(h), core.ArgUint32(9)}}))
	out, err = b.Download(h.Slice(12, 4), nil)
	must(err)
	fmt.Println("last word:", binary.LittleEndian.Uint32(out))
	// Output:
	// fill takes [buffer uint32]
	// first word: 7
	// last word: 9
}

// ExampleUploadSlice moves a []float32 to the device and back without
// converting it: the slice's bytes are the buffer's bytes.
func ExampleUploadSlice() {
	b := openExample()
	defer b.Close()
	xs, err := core.AllocSlice[float32](b, 4)
	must(err)
	defer b.Free(xs)

	must(core.UploadSlice(b, xs, []float32{0.5, 1.5, 2.5, 3.5}))
	must(core.UploadSliceAt(b, xs, 2, []float32{-1}))
	got, err := core.DownloadSlice(b, xs, []float32(nil))
	must(err)
	fmt.Println(got)
	// Output: [0.5 1.5 -1 3.5]
}

// ExampleOptimizerDispatcher_Alloc takes buffers from the dispatcher's
// pool: they work with every Backend verb, go back to the pool on Free, and
// come out again under a new handle, so the old one reaches nothing.
func ExampleOptimizerDispatcher_Alloc() {
	b := openExample()
	defer b.Close()
	d, err := core.NewOptimizerDispatcher(b)
	must(err)
	defer d.Close()

	h, err := d.Alloc(8)
	must(err)
	must(b.Upload(core.UploadAt{Buf: h, Data: []byte("pooled!!")}))
	must(b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{0x2a2a2a2a}}))
	got, err := b.Download(h.All(), nil)
	must(err)
	fmt.Printf("%s\n", got)
	fmt.Println("Backend.Free refused:", errors.Is(b.Free(h), core.ErrOwned))

	must(d.Free(h)) // pooled, not freed
	before := b.MemoryStats().Allocated
	again, err := d.Alloc(8)
	must(err)
	_, err = b.Download(h.All(), nil)
	fmt.Println("new handle:", again.ID != h.ID, "old one unknown:", errors.Is(err, core.ErrUnknownHandle),
		"new device bytes:", b.MemoryStats().Allocated-before)
	must(d.Free(again))
	// Output:
	// ********
	// Backend.Free refused: true
	// new handle: true old one unknown: true new device bytes: 0
}

// ExampleOptimizerDispatcher_AcquireStaticUploads keeps immutable payloads
// on the device, shared by content: kernels read a static set's Bufs, and
// writes into them are refused.
func ExampleOptimizerDispatcher_AcquireStaticUploads() {
	b := openExample()
	defer b.Close()
	d, err := core.NewOptimizerDispatcher(b)
	must(err)
	defer d.Close()

	const domain = 7 // separates this caller's payloads from anyone else's
	set, err := d.AcquireStaticUploads(domain, [][]byte{le32(1, 2, 3, 4)})
	must(err)
	defer d.ReleaseStaticUploads(set)
	weights := set.Bufs[0]

	sum, err := d.Alloc(16)
	must(err)
	defer d.Free(sum)
	out, err := b.Run(core.Batch{
		Steps: []core.Step{{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{weights, weights, sum}}},
		Reads: []core.Range{sum.Slice(12, 4)},
	}, nil)
	must(err)
	fmt.Println("last word doubled:", binary.LittleEndian.Uint32(out[0]))

	err = b.Upload(core.UploadAt{Buf: weights, Data: le32(0)})
	fmt.Println("write refused:", errors.Is(err, core.ErrOwned))
	// Output:
	// last word doubled: 8
	// write refused: true
}
