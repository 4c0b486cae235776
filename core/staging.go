package core

import "fmt"

// staging holds the pinned host blocks one transfer call uses and gives all
// of them back to their pool in release, whichever way the call ends:
//
//	st := newStaging(b.hostPool)
//	defer st.release()
//	buf, err := st.take(op, n)
//
// A staging belongs to one goroutine and must not be copied after its first
// take. Slices returned by take are valid until release; asynchronous copies
// that read or write them must be fenced before release runs.
type staging struct {
	_      stagingNoCopy
	pool   *hostPool
	blocks []pinnedBlock
	inline [4]pinnedBlock // backs blocks for the common case of few transfers
}

// stagingNoCopy lets go vet's copylocks check flag a staging copied after
// construction: blocks may point into the copied-from value's inline array.
type stagingNoCopy struct{}

func (*stagingNoCopy) Lock()   {}
func (*stagingNoCopy) Unlock() {}

// newStaging returns an empty staging that draws from pool.
func newStaging(pool *hostPool) staging {
	return staging{pool: pool}
}

// take returns an n-byte slice of pinned host memory (n > 0) that stays
// owned by s until release. Its capacity is n, so appending to it can never
// write past it into pool memory. Its contents are unspecified. On failure s
// is unchanged and still releases what it took before.
func (s *staging) take(op string, n int) ([]byte, error) {
	blk, err := s.pool.get(op, n)
	if err != nil {
		return nil, err
	}
	if s.blocks == nil {
		s.blocks = s.inline[:0]
	}
	s.blocks = append(s.blocks, blk)
	return blk.buf[:n:n], nil
}

// takeUpload stages data for an upload of n bytes (n >= len(data), n > 0):
// an n-byte pinned slice holding data followed by zeros, for transfers padded
// to a size the device side expects. Pooled blocks hold stale bytes, so the
// padding is cleared explicitly.
func (s *staging) takeUpload(op string, data []byte, n int) ([]byte, error) {
	if n < len(data) {
		return nil, newError(op, KindInvalidArgument,
			fmt.Sprintf("padded upload length %d is smaller than the %d bytes of data", n, len(data)),
			"pass a transfer length at least as long as the data")
	}
	buf, err := s.take(op, n)
	if err != nil {
		return nil, err
	}
	clear(buf[copy(buf, data):])
	return buf, nil
}

// held returns the number of blocks s holds.
func (s *staging) held() int { return len(s.blocks) }

// detach hands every block over to the caller and leaves s empty, so a
// deferred release gives nothing back: for staging that queued work may
// still use after the call ends (see drain).
func (s *staging) detach() []pinnedBlock {
	if len(s.blocks) == 0 {
		return nil
	}
	out := append([]pinnedBlock(nil), s.blocks...)
	clear(s.blocks)
	s.blocks = s.blocks[:0]
	return out
}

// forget empties s without giving its blocks back: for blocks the caller
// handed to an eviction job (evictLater), which keeps copies of them.
func (s *staging) forget() {
	clear(s.blocks)
	s.blocks = s.blocks[:0]
}

// release gives every block back to the pool. It is idempotent: a second
// call finds nothing to give back.
func (s *staging) release() {
	for i := range s.blocks {
		s.pool.put(s.blocks[i])
		s.blocks[i] = pinnedBlock{}
	}
	s.blocks = s.blocks[:0]
}
