package hostmem

import (
	"fmt"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// Staging holds the pinned host blocks one transfer call uses and gives
// all of them back to their pool in ReturnAll, whichever way the call
// ends:
//
//	st := hostmem.NewStaging(pool)
//	defer st.ReturnAll()
//	buf, err := st.Slice(op, n)
//
// A Staging belongs to one goroutine and must not be copied after its
// first Slice. Slices it hands out are valid until ReturnAll; asynchronous
// copies that read or write them must be fenced before ReturnAll runs.
// The zero value holds nothing and must not be asked for slices.
type Staging struct {
	_      stagingNoCopy
	pool   *Pool
	blocks []Block
	inline [4]Block // backs blocks for the common case of few transfers
}

// stagingNoCopy lets go vet's copylocks check flag a Staging copied after
// construction: blocks may point into the copied-from value's inline array.
type stagingNoCopy struct{}

func (*stagingNoCopy) Lock()   {}
func (*stagingNoCopy) Unlock() {}

// NewStaging returns an empty Staging that borrows from pool.
func NewStaging(pool *Pool) Staging {
	return Staging{pool: pool}
}

// Slice returns an n-byte slice of pinned host memory (n > 0) that stays
// s's until ReturnAll. Its capacity is n, so appending to it can never
// write past it into pool memory. Its contents are unspecified. On failure
// s is unchanged and still returns what it took before.
func (s *Staging) Slice(op string, n int) ([]byte, error) {
	blk, err := s.pool.Lend(op, n)
	if err != nil {
		return nil, err
	}
	if s.blocks == nil {
		s.blocks = s.inline[:0]
	}
	s.blocks = append(s.blocks, blk)
	return blk.buf[:n:n], nil
}

// Padded stages data for a transfer of n bytes (n >= len(data), n > 0): an
// n-byte pinned slice holding data followed by zeros, for transfers padded
// to a size the device side expects. Pooled blocks hold stale bytes, so
// the padding is cleared explicitly.
func (s *Staging) Padded(op string, data []byte, n int) ([]byte, error) {
	if n < len(data) {
		return nil, errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("padded upload length %d is smaller than the %d bytes of data", n, len(data)),
			"pass a transfer length at least as long as the data")
	}
	buf, err := s.Slice(op, n)
	if err != nil {
		return nil, err
	}
	clear(buf[copy(buf, data):])
	return buf, nil
}

// Len returns the number of blocks s holds.
func (s *Staging) Len() int { return len(s.blocks) }

// Blocks returns the blocks s holds, in the order their slices were handed
// out; the caller must not change or keep the slice.
func (s *Staging) Blocks() []Block { return s.blocks }

// Detach hands every block over to the caller and leaves s empty, so a
// deferred ReturnAll gives nothing back: for staging that queued work may
// still use after the call ends.
func (s *Staging) Detach() []Block {
	if len(s.blocks) == 0 {
		return nil
	}
	out := append([]Block(nil), s.blocks...)
	clear(s.blocks)
	s.blocks = s.blocks[:0]
	return out
}

// EvictLater hands every block to an eviction job of the pool that evicts
// regions (inside the blocks) and then returns them (Pool.EvictLater), and
// leaves s empty.
func (s *Staging) EvictLater(regions [][]byte, workers int, linger time.Duration) {
	if len(s.blocks) == 0 {
		return
	}
	s.pool.EvictLater(s.blocks, regions, workers, linger)
	clear(s.blocks)
	s.blocks = s.blocks[:0]
}

// ReturnAll gives every block back to the pool. It is idempotent: a second
// call finds nothing to give back.
func (s *Staging) ReturnAll() {
	for i := range s.blocks {
		s.pool.Return(s.blocks[i])
		s.blocks[i] = Block{}
	}
	s.blocks = s.blocks[:0]
}
