package alloc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
)

// The model drives a Cache over a fake device with a sequence of operations
// decoded from 32-bit words, and checks the contract after every one:
//
//   - no address is handed out twice while it is live;
//   - a block reserves at least the request and wastes less than 1/8 of it
//     (or is exact);
//   - live + cached = reserved = what the device holds; reserved never
//     exceeds the budget and cached never exceeds its cap;
//   - after Trim nothing is cached;
//   - liveness: an Alloc of n bytes succeeds exactly when n fits the budget
//     left by the live blocks (cached blocks count as available);
//   - a failed call holds nothing more (it may have given cached blocks back).
//
// It uses none of the Cache's rules beyond those statements.

// modelCapacity is the fake device's memory; the budget is 9/10 of it.
const modelCapacity = 1 << 24

type held struct {
	b Block
	n uint64
}

type model struct {
	d    *fakeDevice
	c    *Cache
	cfg  Config
	held []held
}

func newModel(maxCached, maxClassed uint64) *model {
	d := newFake(modelCapacity)
	cfg := Config{Budget: nineTenths(modelCapacity), MaxCached: maxCached, MaxClassed: maxClassed, IsOutOfMemory: isOOM}
	return &model{d: d, c: New(d, cfg), cfg: cfg}
}

func (m *model) live() uint64 {
	var s uint64
	for _, h := range m.held {
		s += h.b.Size
	}
	return s
}

// size decodes a request size: mostly small and medium, sometimes up to and
// past the budget left.
func (m *model) size(w uint32) uint64 {
	v := uint64(w >> 4)
	switch w % 4 {
	case 0:
		return 1 + v%64
	case 1:
		return 1 + v%(1<<16)
	case 2:
		return 1 + v%(1<<22)
	}
	left := m.cfg.Budget - min(m.live(), m.cfg.Budget)
	return max(left+uint64(v%5), 3) - 2 // left-2 .. left+2
}

// step runs the operation w and checks the contract after it.
func (m *model) step(w uint32) error {
	switch op := w % 16; {
	case op < 8:
		return m.alloc(m.size(w >> 4))
	case op < 13:
		if len(m.held) == 0 {
			return nil
		}
		i := int(w>>4) % len(m.held)
		h := m.held[i]
		if err := m.c.Free(h.b); err != nil {
			return fmt.Errorf("Free(%+v): %v", h.b, err)
		}
		m.held = append(m.held[:i], m.held[i+1:]...)
	case op < 15:
		if err := m.c.Trim(); err != nil {
			return fmt.Errorf("Trim: %v", err)
		}
		if st := m.c.Stats(); st.Cached != 0 || st.CachedBlocks != 0 {
			return fmt.Errorf("after Trim %d bytes in %d blocks are cached", st.Cached, st.CachedBlocks)
		}
	default:
		// A device failure changes nothing; a hit needs no device call.
		before := m.c.Stats()
		n := m.size(w >> 5)
		m.d.failAlloc, m.d.failRead = w&(1<<4) != 0, w&(1<<4) == 0
		b, err := m.c.Alloc(n)
		m.d.failAlloc, m.d.failRead = false, false
		if err == nil {
			if m.c.Stats().Hits != before.Hits+1 {
				return fmt.Errorf("Alloc(%d) succeeded with a device fault armed and was no hit", n)
			}
			m.held = append(m.held, held{b: b, n: n})
			break
		}
		var de *DeviceError
		var se *ShortError
		if !errors.As(err, &de) && !errors.As(err, &se) {
			return fmt.Errorf("Alloc with a device fault: %v", err)
		}
		after := m.c.Stats()
		// Giving cached blocks back on the way is allowed; nothing else.
		if after.Live != before.Live || after.Cached > before.Cached {
			return fmt.Errorf("a failed Alloc changed the accounting: %+v -> %+v", before, after)
		}
	}
	return m.check()
}

func (m *model) alloc(n uint64) error {
	live := m.live()
	fits := live <= m.cfg.Budget && n <= m.cfg.Budget-live
	b, err := m.c.Alloc(n)
	if err != nil {
		var se *ShortError
		if fits || !errors.As(err, &se) {
			return fmt.Errorf("Alloc(%d) with %d live of a %d budget: %v", n, live, m.cfg.Budget, err)
		}
		return m.check()
	}
	if !fits {
		return fmt.Errorf("Alloc(%d) succeeded with %d live of a %d budget", n, live, m.cfg.Budget)
	}
	if b.Size < n || (b.Size != n && 8*(b.Size-n) >= n) {
		return fmt.Errorf("Alloc(%d) reserved %d bytes", n, b.Size)
	}
	for _, h := range m.held {
		if h.b.Ptr == b.Ptr {
			return fmt.Errorf("Alloc(%d) handed out %#x, which is live", n, b.Ptr)
		}
	}
	if _, ok := m.d.live[b.Ptr]; !ok {
		return fmt.Errorf("Alloc(%d) handed out %#x, which the device does not hold", n, b.Ptr)
	}
	m.held = append(m.held, held{b: b, n: n})
	return m.check()
}

func (m *model) check() error {
	st := m.c.Stats()
	live := m.live()
	switch {
	case st.Live != live || st.LiveBlocks != uint64(len(m.held)):
		return fmt.Errorf("stats say %d live bytes in %d blocks; %d bytes in %d blocks are held", st.Live, st.LiveBlocks, live, len(m.held))
	case st.Reserved != st.Live+st.Cached:
		return fmt.Errorf("reserved %d != live %d + cached %d", st.Reserved, st.Live, st.Cached)
	case st.Reserved != m.d.used:
		return fmt.Errorf("reserved %d but the device holds %d", st.Reserved, m.d.used)
	case st.Reserved > m.cfg.Budget:
		return fmt.Errorf("reserved %d exceeds the budget %d", st.Reserved, m.cfg.Budget)
	case st.Cached > m.cfg.MaxCached:
		return fmt.Errorf("cached %d exceeds the cap %d", st.Cached, m.cfg.MaxCached)
	case st.PeakReserved < st.Reserved || st.PeakLive < st.Live:
		return fmt.Errorf("peaks below current values: %+v", st)
	case st.DeviceAllocs-st.DeviceFrees != uint64(len(m.d.live)):
		return fmt.Errorf("%d device allocs - %d frees, the device holds %d blocks", st.DeviceAllocs, st.DeviceFrees, len(m.d.live))
	}
	return nil
}

// finish frees everything, trims and checks the device is empty.
func (m *model) finish() error {
	for _, h := range m.held {
		if err := m.c.Free(h.b); err != nil {
			return err
		}
	}
	m.held = nil
	if err := m.c.Close(); err != nil {
		return err
	}
	if m.d.used != 0 || len(m.d.live) != 0 {
		return fmt.Errorf("after Close the device holds %d bytes in %d blocks", m.d.used, len(m.d.live))
	}
	return m.check()
}

// runModel runs ops on a fresh model and returns the first violation.
func runModel(maxCached, maxClassed uint64, ops []uint32) error {
	m := newModel(maxCached, maxClassed)
	for i, w := range ops {
		if err := m.step(w); err != nil {
			return fmt.Errorf("op %d (%#x): %w", i, w, err)
		}
	}
	return m.finish()
}

func modelSeed(t *testing.T) int64 {
	if s := os.Getenv("PROPTEST_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PROPTEST_SEED=%q: %v", s, err)
		}
		return v
	}
	return 20261123
}

func TestCacheModel(t *testing.T) {
	params := gopter.DefaultTestParametersWithSeed(modelSeed(t))
	params.MinSuccessfulTests = 300
	props := gopter.NewProperties(params)
	props.Property("random alloc/free/trim sequences keep the contract", prop.ForAll(
		func(capSel, classSel uint8, ops []uint32) string {
			maxCached := []uint64{0, 1 << 12, 1 << 20, modelCapacity}[capSel%4]
			maxClassed := []uint64{0, 1 << 16, 1 << 22}[classSel%3]
			if err := runModel(maxCached, maxClassed, ops); err != nil {
				return err.Error()
			}
			return ""
		},
		gen.UInt8(), gen.UInt8(), gen.SliceOf(gen.UInt32()),
	))
	props.TestingRun(t)
}

// FuzzCacheSequence decodes a config byte and 4-byte operations and runs
// them through the model.
func FuzzCacheSequence(f *testing.F) {
	f.Add([]byte{0x03, 0, 0, 0, 0, 0x0d, 0, 0, 0, 0x0f, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		sel := data[0]
		data = data[1:]
		var ops []uint32
		for len(data) >= 4 && len(ops) < 512 {
			ops = append(ops, binary.LittleEndian.Uint32(data))
			data = data[4:]
		}
		maxCached := []uint64{0, 1 << 12, 1 << 20, modelCapacity}[sel%4]
		maxClassed := []uint64{0, 1 << 16, 1 << 22}[(sel/4)%3]
		if err := runModel(maxCached, maxClassed, ops); err != nil {
			t.Fatal(err)
		}
	})
}
