package core_test

import (
	"encoding/binary"
	"fmt"
	"log"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// ExampleBackend_Capture captures a batch (upload x, add y on the device,
// read the sum) once, then replays it with new input bytes each time: one
// graph launch and one fence per replay. The graph reads x's current bytes
// at every replay, so the caller only rewrites them.
func ExampleBackend_Capture() {
	b, err := core.Open(sim.New(sim.Config{})) // on a GPU: core.OpenCUDA(0)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	var bufs [3]core.Buffer // x, y and sum: four uint32 words each
	for i := range bufs {
		if bufs[i], err = b.Alloc(16); err != nil {
			log.Fatal(err)
		}
	}
	x, y, sum := bufs[0], bufs[1], bufs[2]
	if err := b.Upload(core.UploadAt{Buf: y, Data: le32(100, 200, 300, 400)}); err != nil {
		log.Fatal(err)
	}
	in := make([]byte, 16) // the graph's upload source: rewrite it, never reslice it
	g, err := b.Capture(core.Batch{
		Uploads: []core.UploadAt{{Buf: x, Data: in}},
		Steps:   []core.Step{{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{x, y, sum}}},
		Reads:   []core.Range{{Buf: sum, Len: 16}},
	})
	if err != nil {
		log.Fatal(err)
	}
	var out [][]byte // reused by every replay, append-style
	for k := uint32(1); k <= 3; k++ {
		copy(in, le32(k, k, k, k))
		if out, err = g.Replay(out); err != nil {
			log.Fatal(err)
		}
		fmt.Println("replay", k, "first word:", binary.LittleEndian.Uint32(out[0]))
	}
	// The graph holds x, y and sum in flight until it is closed.
	fmt.Println("free while captured:", b.Free(x) != nil)
	if err := g.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("fences:", b.Telemetry().SyncPoints, "free after Close:", b.Free(x) == nil)
	// Output:
	// replay 1 first word: 101
	// replay 2 first word: 102
	// replay 3 first word: 103
	// free while captured: true
	// fences: 4 free after Close: true
}
