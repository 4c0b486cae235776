package devmem

// Scratch holds the device blocks one dispatch uses (its scratch buffers
// and parameter block) and gives all of them back to the pool in FreeAll,
// on success and failure alike:
//
//	sc := devmem.NewScratch(pool)
//	defer sc.FreeAll()
//	blk, err := sc.Add(op, n)
//
// It belongs to one goroutine (or to the pending dispatch that owns it)
// and must not be copied after its first Add.
type Scratch struct {
	pool   *Pool
	blocks []Block
}

// NewScratch returns an empty set that draws from pool.
func NewScratch(pool *Pool) Scratch {
	return Scratch{pool: pool}
}

// Add allocates a block of at least n bytes (n > 0, from n's size class)
// that s holds until FreeAll. On failure s is unchanged and still frees
// what it held before.
func (s *Scratch) Add(op string, n int) (Block, error) {
	b, err := s.pool.Alloc(op, n, true)
	if err != nil {
		return Block{}, err
	}
	s.blocks = append(s.blocks, b)
	return b, nil
}

// Len returns the number of blocks s holds.
func (s *Scratch) Len() int { return len(s.blocks) }

// FreeAll gives every block back to the pool (Pool.FreeOrKeep). It is
// idempotent.
func (s *Scratch) FreeAll() {
	for i := range s.blocks {
		s.pool.FreeOrKeep(s.blocks[i])
		s.blocks[i] = Block{}
	}
	s.blocks = s.blocks[:0]
}
