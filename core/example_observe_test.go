package core_test

import (
	"encoding/json"
	"fmt"
	"log"
	"path"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// ExampleBackend_RecordMemoryHistory records where device memory was
// allocated, then reads the history back from a snapshot. Written with
// encoding/json, the snapshot is what `vyrecuda memplot` draws.
func ExampleBackend_RecordMemoryHistory() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.RecordMemoryHistory(1000); err != nil { // keep the last 1000 events
		log.Fatal(err)
	}
	weights, err := core.AllocSlice[float32](b, 1<<10)
	if err != nil {
		log.Fatal(err)
	}
	tmp, err := b.Alloc(100)
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Free(tmp); err != nil {
		log.Fatal(err)
	}

	snap := b.MemorySnapshot()
	for _, e := range snap.Events {
		fmt.Printf("%-5s %-10s %5d bytes, allocated now %d, called from %s\n",
			e.Kind, e.Op, e.Requested, e.Allocated, path.Base(e.Stack[0].Function))
	}
	for _, blk := range snap.Blocks {
		fmt.Printf("live: buffer %v, %d bytes from %s\n", blk.Buffer == weights.ID, blk.Requested, blk.Op)
	}
	if _, err := json.Marshal(snap); err != nil { // json.NewEncoder(file).Encode(snap) for memplot
		log.Fatal(err)
	}
	// Output:
	// alloc AllocSlice  4096 bytes, allocated now 4096, called from core_test.ExampleBackend_RecordMemoryHistory
	// alloc Alloc        100 bytes, allocated now 4196, called from core_test.ExampleBackend_RecordMemoryHistory
	// free  Free         100 bytes, allocated now 4096, called from core_test.ExampleBackend_RecordMemoryHistory
	// live: buffer true, 4096 bytes from AllocSlice
}

// ExampleAsBytes passes typed data where a call takes bytes, without
// copying or encoding it.
func ExampleAsBytes() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	h, err := core.AllocSlice[int16](b, 4)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Free(h)
	in := []int16{-1, 2, -3, 4}
	if err := b.Upload(core.UploadAt{Buf: h, Data: core.AsBytes(in)}); err != nil {
		log.Fatal(err)
	}
	out := make([]int16, 4)
	if _, err := b.Download(h.All(), core.AsBytes(out)[:0]); err != nil { // into out's storage
		log.Fatal(err)
	}
	fmt.Println(out, len(core.AsBytes(out)))
	// Output: [-1 2 -3 4] 8
}
