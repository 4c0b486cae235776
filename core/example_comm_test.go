package core_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// ExampleBackend_JoinCommContext joins two ranks of a communicator with a
// deadline, as two processes would (here two goroutines over the devices
// of a simulated machine), and all-reduces one int32 per rank. A join
// whose other rank never starts returns once the deadline passes instead
// of waiting for good.
func ExampleBackend_JoinCommContext() {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2}) // on GPUs: core.OpenCUDA(ordinal) per process
	if err != nil {
		log.Fatal(err)
	}
	g, err := core.OpenGroup(m.Drivers())
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	bs := g.Backends()
	id, err := bs[0].NewCommID() // one rank makes the id and hands it to the others
	if err != nil {
		log.Fatal(err)
	}

	// Rank 1 never starts: rank 0 gives up after 10 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	_, err = bs[0].JoinCommContext(ctx, id, 2, 0)
	cancel()
	fmt.Println("alone:", errors.Is(err, context.DeadlineExceeded), errors.Is(err, core.ErrInFlight))

	// Both ranks start: each joins and all-reduces its own buffer.
	id, err = bs[0].NewCommID()
	if err != nil {
		log.Fatal(err)
	}
	sums := make([]int32, 2)
	var wg sync.WaitGroup
	for rank, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := b.JoinCommContext(ctx, id, 2, rank)
			if err != nil {
				log.Fatal(err)
			}
			defer c.Close()
			buf, err := b.Alloc(4)
			if err != nil {
				log.Fatal(err)
			}
			defer b.Free(buf)
			if err := b.Upload(core.UploadAt{Buf: buf, Data: binary.LittleEndian.AppendUint32(nil, uint32(10*(rank+1)))}); err != nil {
				log.Fatal(err)
			}
			if err := c.AllReduceContext(ctx, buf, buf, core.DataInt32, core.ReduceSum); err != nil {
				log.Fatal(err)
			}
			out, err := b.Download(buf.All(), nil)
			if err != nil {
				log.Fatal(err)
			}
			sums[rank] = int32(binary.LittleEndian.Uint32(out))
		}()
	}
	wg.Wait()
	fmt.Println("sums:", sums)
	// Output:
	// alone: true true
	// sums: [30 30]
}
