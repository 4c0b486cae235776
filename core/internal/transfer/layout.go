package transfer

import (
	"encoding/binary"
	"math"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/kernels"
)

// Many small copies are packed: their bytes and a table of where each goes
// travel in one pinned staging block, with one DMA into a pooled device
// staging allocation and one scatter launch that puts every piece in place
// (readbacks: one gather launch, one DMA back, unpacked on the host). On the
// reference H100 1024 separate 4 KiB copies cost 2.7 ms (about 2.6 us of
// driver work each); the packed form, packed on 16 goroutines with
// non-temporal stores while earlier parts' DMAs run, 0.18 ms: about 42 us
// of host bookkeeping, 50 us of packing and 84 us waiting for the DMAs and
// the scatter (core's BenchmarkGPUW1Phases).
const (
	// packAlign aligns each piece and the table in the packed block, so the
	// kernel moves 16-byte words when the device side is aligned too.
	packAlign = 16
	// PackBlockThreads is the threads per block of the scatter and gather
	// launches: one 16-byte word each for a 4 KiB piece. The kernel is not
	// where W1/W3 time goes (launch plus kernel ~20 us of ~420 on an H200
	// host); 128 threads, 512 threads with 512 blocks and 256 blocks (four
	// entries each) all measured within run-to-run spread of 256.
	PackBlockThreads = 256
	// packMaxGrid caps the grid; the kernels stride over the entries.
	packMaxGrid = 65535
	// packFenceSpin is how long a packed call polls StreamQuery before it
	// blocks in StreamSynchronize; < 0: it blocks at once.
	packFenceSpin = -1
)

// packEntryBytes bounds the bytes of one table entry. The kernels give
// each entry one thread block, which moves 16-byte words only when the
// entry's length and both addresses are multiples of 16 and single bytes
// otherwise: one entry per piece kept a 256 KiB piece of odd length on one
// block moving bytes, and the scatter of W7 (2048 pieces of 16 B-256 KiB)
// took about 420 us on the reference H100. Each piece's 16-byte-multiple
// body is therefore split into entries of at most packEntryBytes, spread
// over many blocks, and its last len%16 bytes get an entry of their own.
const packEntryBytes = 16 << 10

// pieceEntries is the number of table entries of a piece of n bytes.
func pieceEntries(n int) int {
	body := n &^ (packAlign - 1)
	k := (body + packEntryBytes - 1) / packEntryBytes
	if body < n {
		k++
	}
	return k
}

// Layout places pieces in one packed block: piece i at Offs[i] (16-byte
// aligned), the data ending at DataEnd, then the table at Table, Entries
// entries of which piece i's start at first[i], Total bytes in all.
type Layout struct {
	Offs    []int
	first   []int
	DataEnd int
	Table   int
	Entries int
	Total   int
}

// NewLayout lays out n pieces, piece i of length(i) bytes.
func NewLayout(n int, length func(i int) int) Layout {
	return NewLayoutIn(make([]int, n), make([]int, n), length)
}

// NewLayoutIn is NewLayout placing len(offs) pieces into offs and first
// (of at least that length), so pooled slices can hold them.
func NewLayoutIn(offs, first []int, length func(i int) int) Layout {
	first = first[:len(offs)]
	off, ents, end := 0, 0, 0
	for i := range offs {
		n := length(i)
		offs[i], first[i] = off, ents
		ents += pieceEntries(n)
		end = off + n
		off = alignUp(end, packAlign)
	}
	return Layout{Offs: offs, first: first, DataEnd: end, Table: off, Entries: ents,
		Total: off + ents*kernels.TableEntryBytes}
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// PutEntries writes the table entries of piece i into the block stage: n
// bytes between device address addr and the piece's place in the block.
func (l *Layout) PutEntries(stage []byte, i int, addr uint64, n int) {
	l.PutTable(stage[l.Table:], i, addr, n)
}

// PutTable is PutEntries into tab, the table alone. Most pieces take one
// entry, written without the splitting loop: with that and NewLayoutIn
// keeping its sums in locals, W3's table phase (1024 pieces) took 16.5-17.1
// us against 21.3-21.5 on the reference H100 host (BenchmarkGPUW3Phases,
// three alternations).
func (l *Layout) PutTable(tab []byte, i int, addr uint64, n int) {
	e := l.first[i] * kernels.TableEntryBytes
	body := n &^ (packAlign - 1)
	if body == n && n > 0 && n <= packEntryBytes {
		// The usual piece: one entry, no tail.
		putEntry(tab[e:], addr, l.Offs[i], n)
		return
	}
	for k := 0; k < body; k += packEntryBytes {
		putEntry(tab[e:], addr+uint64(k), l.Offs[i]+k, min(packEntryBytes, body-k))
		e += kernels.TableEntryBytes
	}
	if body < n {
		putEntry(tab[e:], addr+uint64(body), l.Offs[i]+body, n-body)
	}
}

// putEntry writes one table entry at the start of e.
func putEntry(e []byte, addr uint64, off, n int) {
	_ = e[kernels.TableEntryBytes-1] // one bounds check for the three words
	binary.LittleEndian.PutUint64(e[0:], addr)
	binary.LittleEndian.PutUint64(e[8:], uint64(off))
	binary.LittleEndian.PutUint64(e[16:], uint64(n))
}

// Packable reports whether the kernels can take l's entries (their count
// is a 32-bit parameter).
func (l *Layout) Packable() bool { return l.Entries <= math.MaxUint32 }

// PackLaunch is the geometry of a scatter or gather over n entries.
func (t *Tuning) PackLaunch(n int) driver.LaunchConfig {
	return driver.LaunchConfig{Grid: [3]uint32{uint32(min(n, t.PackGrid)), 1, 1}, Block: [3]uint32{uint32(t.PackBlock), 1, 1}}
}
