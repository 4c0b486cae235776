package core_test

import (
	"fmt"
	"log"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// Example is the first program to read, and the README's example (a test in
// cmd/vyrecuda keeps the two identical): open a Backend, allocate two
// buffers, upload into one, copy it into the other on the device, read the
// result back, then free both buffers and close.
func Example() {
	b, err := core.Open(sim.New(sim.Config{})) // on a GPU: core.OpenCUDA(0)
	if err != nil {
		log.Fatal(err)
	}
	src, err := b.Alloc(16)
	if err != nil {
		log.Fatal(err)
	}
	dst, err := b.Alloc(16)
	if err != nil {
		log.Fatal(err)
	}
	// Two pieces of src in one call: one fence for both.
	err = b.Upload(
		core.UploadAt{Buf: src, Offset: 0, Data: []byte("hello, ")},
		core.UploadAt{Buf: src, Offset: 7, Data: []byte("resident!")},
	)
	if err != nil {
		log.Fatal(err)
	}
	// The built-in copy kernel: buffers (src, dst), 32-bit words.
	err = b.Dispatch(core.ProgramCopyU32(), []core.Buffer{src, dst}, core.DispatchConfig{})
	if err != nil {
		log.Fatal(err)
	}
	all, err := b.Download(dst.All(), nil) // a new slice; pass one to reuse its storage
	if err != nil {
		log.Fatal(err)
	}
	word, err := b.Download(dst.Slice(7, 8), nil) // 8 bytes from offset 7
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s | %s\n", all, word)
	for _, h := range []core.Buffer{src, dst} {
		if err := b.Free(h); err != nil {
			log.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		log.Fatal(err)
	}
	// Output: hello, resident! | resident
}
