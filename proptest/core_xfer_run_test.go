package proptest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// xferRun runs c's batch of uploads or reads through Backend.Run or,
// drawn, RunAsync and AwaitInto, and checks its result: the device holds
// the uploads; the reads come back in slots of exactly the needed
// capacity, reused. When it fails, the caller's slots are unchanged.
func xferRun(r *rand.Rand, b *core.Backend, dev *sim.Device, c xferCase, hs []core.Buffer, old [][]byte) error {
	var batch core.Batch
	var data [][]byte
	if c.op == xferRunUploads {
		for _, h := range hs {
			d := randomXferBytes(r, h.Len)
			data = append(data, d)
			batch.Uploads = append(batch.Uploads, core.UploadAt{Buf: h, Data: d})
		}
	} else {
		for _, h := range hs {
			batch.Reads = append(batch.Reads, core.Range{Buf: h, Len: h.Len})
		}
	}
	dst := make([][]byte, len(batch.Reads))
	for i, x := range batch.Reads {
		dst[i] = make([]byte, 0, x.Len)
	}
	before := snap2(dst)
	var out [][]byte
	var err error
	if r.Intn(2) == 0 {
		out, err = b.Run(batch, dst)
	} else {
		var p *core.Pending
		if p, err = b.RunAsync(batch); err == nil {
			if out, err = p.AwaitInto(dst); err != nil {
				err = errors.Join(err, p.Close())
			}
		} else {
			out = dst
		}
	}
	if err != nil {
		if !snap2(dst).equal(before) || unsafe.SliceData(out) != unsafe.SliceData(dst) {
			return errors.Join(err, errors.New("a failed batch changed the caller's slots"))
		}
		return err
	}
	for i, h := range hs {
		if c.op == xferRunUploads {
			if got := deviceXferBytes(b, dev, h); !bytes.Equal(got, data[i]) {
				return fmt.Errorf("buffer %d holds other bytes after the batch", i)
			}
			old[i] = data[i]
			continue
		}
		if !bytes.Equal(out[i], old[i]) {
			return fmt.Errorf("read %d holds other bytes", i)
		}
		if unsafe.SliceData(out[i]) != unsafe.SliceData(dst[i]) {
			return fmt.Errorf("read slot %d of exactly the needed capacity was not reused", i)
		}
	}
	return nil
}

// classifyRun names the plan a fault-free batch's transfers took from its
// device calls (d gives each operation's count).
func classifyRun(c xferCase, d func(sim.Op) uint64, seen *xferSeen, chunkings map[uint64]bool) {
	switch {
	case d(sim.OpLaunch) > 0 && c.op == xferRunUploads:
		seen.batchPackedUp++
	case d(sim.OpLaunch) > 0:
		seen.batchPackedRd++
	case c.op == xferRunUploads && len(c.lens) == 1 && d(sim.OpMemcpyHtoDAsync) > 1:
		seen.batchStaged++
		chunkings[d(sim.OpMemcpyHtoDAsync)] = true
	default:
		seen.perCopy++
	}
}
