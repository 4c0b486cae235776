package proptest

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"

	"github.com/vyre-go/vyrecuda/accounting"
)

// defaultSeed makes every CI run check the same cases. PROPTEST_SEED
// overrides it to explore others.
const defaultSeed = 20261122

// propParameters returns gopter parameters with a fixed seed (or
// PROPTEST_SEED) and minSuccessful cases. When the test fails it logs the
// command that replays the same cases.
func propParameters(t *testing.T, minSuccessful int) *gopter.TestParameters {
	t.Helper()
	seed := int64(defaultSeed)
	if s := os.Getenv("PROPTEST_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PROPTEST_SEED=%q is not an integer: %v", s, err)
		}
		seed = v
	}
	params := gopter.DefaultTestParametersWithSeed(seed)
	params.MinSuccessfulTests = minSuccessful
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce with: PROPTEST_SEED=%d go test -run '^%s$' ./proptest", seed, t.Name())
		}
	})
	return params
}

var (
	bigMaxUint64 = new(big.Int).SetUint64(math.MaxUint64)
	bigMaxInt    = big.NewInt(math.MaxInt)
)

func bigUint64(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// interesting generates values that are mostly near the edges of the type,
// where checked arithmetic can go wrong, and sometimes anywhere.
func edgyUint64() gopter.Gen {
	return gen.Frequency(map[int]gopter.Gen{
		4: gen.UInt64Range(0, 64),
		3: gen.UInt64Range(math.MaxUint64-64, math.MaxUint64),
		1: gen.UInt64Range(math.MaxUint64/2-32, math.MaxUint64/2+32),
		2: gen.UInt64(),
	})
}

func edgyInt() gopter.Gen {
	return gen.Frequency(map[int]gopter.Gen{
		4: gen.IntRange(-8, 64),
		3: gen.IntRange(math.MaxInt-64, math.MaxInt),
		1: gen.IntRange(math.MinInt, math.MinInt+8),
		2: gen.Int(),
	})
}

// checkSentinel checks a result against the model: err must wrap want (or
// be nil when want is nil), and on success got must equal the model value.
func checkSentinel(name string, got uint64, err error, want error, model *big.Int) string {
	if want != nil {
		if !errors.Is(err, want) {
			return fmt.Sprintf("%s: want %v, got %v (value %d)", name, want, err, got)
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("%s: unexpected error %v", name, err)
	}
	if !model.IsUint64() || model.Uint64() != got {
		return fmt.Sprintf("%s = %d, want %s", name, got, model)
	}
	return ""
}

// CheckAccountingArithmetic checks every checked operation on (a, b) and
// (x, y, z) against math/big. It is shared by the properties and the fuzz
// target.
func checkAccountingArithmetic(a, b uint64, x, y, z int) string {
	if m := checkUint64Arithmetic(a, b); m != "" {
		return m
	}
	if m := checkLenArithmetic(x, y, z); m != "" {
		return m
	}
	return checkPtrArithmetic(a, x)
}

// checkUint64Arithmetic checks AddUint64 and SubUint64 on (a, b) against
// math/big.
func checkUint64Arithmetic(a, b uint64) string {
	sum := new(big.Int).Add(bigUint64(a), bigUint64(b))
	var want error
	if sum.Cmp(bigMaxUint64) > 0 {
		want = accounting.ErrOverflow
	}
	got, err := accounting.AddUint64(a, b)
	if m := checkSentinel("AddUint64", got, err, want, sum); m != "" {
		return m
	}

	diff := new(big.Int).Sub(bigUint64(a), bigUint64(b))
	want = nil
	if diff.Sign() < 0 {
		want = accounting.ErrUnderflow
	}
	got, err = accounting.SubUint64(a, b)
	return checkSentinel("SubUint64", got, err, want, diff)
}

// checkIntSentinel is checkSentinel for an int result.
func checkIntSentinel(name string, got int, err error, want error, model *big.Int) string {
	return checkSentinel(name, uint64(got), err, want, model)
}

// checkLenArithmetic checks AddLen and SubLen on (x, y) and RangeEnd on
// (x, y, z) against math/big, and that RangeEnd's errors carry the numbers.
func checkLenArithmetic(x, y, z int) string {
	bx, by, bz := big.NewInt(int64(x)), big.NewInt(int64(y)), big.NewInt(int64(z))
	var want error
	lenSum := new(big.Int).Add(bx, by)
	switch {
	case x < 0 || y < 0:
		want = accounting.ErrNegative
	case lenSum.Cmp(bigMaxInt) > 0:
		want = accounting.ErrOverflow
	default:
		want = nil
	}
	gotI, err := accounting.AddLen(x, y)
	if m := checkIntSentinel("AddLen", gotI, err, want, lenSum); m != "" {
		return m
	}

	lenDiff := new(big.Int).Sub(bx, by)
	switch {
	case x < 0 || y < 0:
		want = accounting.ErrNegative
	case lenDiff.Sign() < 0:
		want = accounting.ErrUnderflow
	default:
		want = nil
	}
	gotI, err = accounting.SubLen(x, y)
	if m := checkIntSentinel("SubLen", gotI, err, want, lenDiff); m != "" {
		return m
	}

	switch {
	case x < 0 || y < 0 || z < 0:
		want = accounting.ErrNegative
	case lenSum.Cmp(bigMaxInt) > 0:
		want = accounting.ErrOverflow
	case lenSum.Cmp(bz) > 0:
		want = accounting.ErrOutOfRange
	default:
		want = nil
	}
	gotI, err = accounting.RangeEnd(x, y, z)
	if m := checkIntSentinel("RangeEnd", gotI, err, want, lenSum); m != "" {
		return m
	}
	if err != nil && !(strings.Contains(err.Error(), strconv.Itoa(x)) && strings.Contains(err.Error(), strconv.Itoa(y))) && !errors.Is(err, accounting.ErrOutOfRange) {
		return fmt.Sprintf("RangeEnd(%d, %d, %d) error does not carry the numbers: %v", x, y, z, err)
	}
	return ""
}

// checkPtrArithmetic checks AddPtr on (a, x) and LenUint64 on x against
// math/big.
func checkPtrArithmetic(a uint64, x int) string {
	bx := big.NewInt(int64(x))
	var want error
	ptr := new(big.Int).Add(bigUint64(a), bx)
	switch {
	case x < 0:
		want = accounting.ErrNegative
	case ptr.Cmp(bigMaxUint64) > 0:
		want = accounting.ErrOverflow
	default:
		want = nil
	}
	got, err := accounting.AddPtr(a, x)
	if m := checkSentinel("AddPtr", got, err, want, ptr); m != "" {
		return m
	}

	want = nil
	if x < 0 {
		want = accounting.ErrNegative
	}
	got, err = accounting.LenUint64(x)
	return checkSentinel("LenUint64", got, err, want, bx)
}

// checkBudgets checks the budget and bucket formulas against math/big and
// the reference's definitions.
func checkBudgets(total, liveFree, resident uint64, n, maxCached int) string {
	nineTenths := func(v uint64) uint64 {
		r := new(big.Int).Mul(bigUint64(v), big.NewInt(9))
		return r.Div(r, big.NewInt(10)).Uint64()
	}
	if got, want := accounting.ResidentTotalBudget(total), nineTenths(total); got != want {
		return fmt.Sprintf("ResidentTotalBudget(%d) = %d, want %d", total, got, want)
	}
	budget := nineTenths(total)
	want := resident
	if resident < budget {
		want = resident + min(budget-resident, nineTenths(liveFree))
	}
	got := accounting.ResidentLiveBudget(total, liveFree, resident)
	if got != want {
		return fmt.Sprintf("ResidentLiveBudget(%d, %d, %d) = %d, want %d", total, liveFree, resident, got, want)
	}
	if got < resident || (resident < budget && got > budget) {
		return fmt.Sprintf("ResidentLiveBudget(%d, %d, %d) = %d is outside [resident, max(resident, budget)]", total, liveFree, resident, got)
	}
	if got := accounting.OptimizerPoolBudget(total); got != total/32 {
		return fmt.Sprintf("OptimizerPoolBudget(%d) = %d, want %d", total, got, total/32)
	}

	bucket, err := accounting.BucketSize(n)
	switch {
	case n < 0:
		if !errors.Is(err, accounting.ErrNegative) {
			return fmt.Sprintf("BucketSize(%d): want ErrNegative, got %v", n, err)
		}
	case n > 1<<62:
		if !errors.Is(err, accounting.ErrOverflow) {
			return fmt.Sprintf("BucketSize(%d): want ErrOverflow, got %v", n, err)
		}
	default:
		if err != nil || bucket < 1 || bucket&(bucket-1) != 0 || bucket < n || (bucket > 1 && bucket/2 >= n) {
			return fmt.Sprintf("BucketSize(%d) = %d, %v: want the least power of two >= max(n, 1)", n, bucket, err)
		}
	}

	b := max(bucket, 1)
	wantSlots := min(max(max(maxCached, 0)/b, 1), 1024)
	if got := accounting.BucketSlots(b, maxCached); got != wantSlots || got < 1 || got > 1024 {
		return fmt.Sprintf("BucketSlots(%d, %d) = %d, want %d", b, maxCached, got, wantSlots)
	}
	return ""
}

// counterStep is one step of a generated Counter sequence.
type counterStep struct {
	Kind int // 0 Add, 1 AddGuarded, 2 Sub, 3 SubOrRepair, 4 Next
	N    uint64
	Cap  uint64 // AddGuarded's guard refuses next > Cap
}

// checkCounterOps applies ops to a Counter starting at start and to a
// math/big model, checking each result and that failures change nothing.
func checkCounterOps(start uint64, ops []counterStep) string {
	var c accounting.Counter
	c.Store(start)
	model := bigUint64(start)
	errGuard := errors.New("guard refused")
	for i, op := range ops {
		msg, applied := "", true
		switch op.Kind % 5 {
		case 0:
			msg, applied = counterAddStep(&c, model, i, op)
		case 1:
			msg, applied = counterAddGuardedStep(&c, model, i, op, errGuard)
		case 2:
			msg, applied = counterSubStep(&c, model, i, op)
		case 3:
			msg = counterSubOrRepairStep(&c, model, i, op)
		case 4:
			msg, applied = counterNextStep(&c, model, i)
		}
		if msg != "" {
			return msg
		}
		if !applied {
			continue // refused as it should be, and nothing changed
		}
		if !model.IsUint64() || c.Load() != model.Uint64() {
			return fmt.Sprintf("op %d (%+v): counter %d, model %s", i, op, c.Load(), model)
		}
	}
	return ""
}

// counterAddStep applies step i, an Add, to c and model: past the top of
// uint64 it must fail with ErrOverflow and change nothing (applied false),
// otherwise succeed. It returns what went wrong, or "".
func counterAddStep(c *accounting.Counter, model *big.Int, i int, op counterStep) (msg string, applied bool) {
	before := c.Load()
	next := new(big.Int).Add(model, bigUint64(op.N))
	err := c.Add(op.N)
	if next.Cmp(bigMaxUint64) > 0 {
		if !errors.Is(err, accounting.ErrOverflow) || c.Load() != before {
			return fmt.Sprintf("op %d Add(%d) at %d: want ErrOverflow and no change, got %v, %d", i, op.N, before, err, c.Load()), false
		}
		return "", false
	}
	if err != nil {
		return fmt.Sprintf("op %d Add(%d) at %d: %v", i, op.N, before, err), false
	}
	model.Set(next)
	return "", true
}

// counterAddGuardedStep applies step i, an AddGuarded whose guard refuses
// totals over op.Cap with errGuard, to c and model: the guard must see the
// new total, and an overflow or a refusal must change nothing (applied
// false). It returns what went wrong, or "".
func counterAddGuardedStep(c *accounting.Counter, model *big.Int, i int, op counterStep, errGuard error) (msg string, applied bool) {
	before := c.Load()
	next := new(big.Int).Add(model, bigUint64(op.N))
	seen := uint64(0)
	err := c.AddGuarded(op.N, func(v uint64) error {
		seen = v
		if v > op.Cap {
			return errGuard
		}
		return nil
	})
	switch {
	case next.Cmp(bigMaxUint64) > 0:
		if !errors.Is(err, accounting.ErrOverflow) || c.Load() != before {
			return fmt.Sprintf("op %d AddGuarded(%d) at %d: want ErrOverflow, got %v", i, op.N, before, err), false
		}
		return "", false
	case seen != next.Uint64():
		return fmt.Sprintf("op %d AddGuarded(%d) at %d: guard saw %d, want %s", i, op.N, before, seen, next), false
	case next.Uint64() > op.Cap:
		if !errors.Is(err, errGuard) || c.Load() != before {
			return fmt.Sprintf("op %d AddGuarded refused by guard: want its error and no change, got %v, %d", i, err, c.Load()), false
		}
		return "", false
	case err != nil:
		return fmt.Sprintf("op %d AddGuarded(%d): %v", i, op.N, err), false
	}
	model.Set(next)
	return "", true
}

// counterSubStep applies step i, a Sub, to c and model: below zero it must
// fail with ErrUnderflow and change nothing (applied false), otherwise
// succeed. It returns what went wrong, or "".
func counterSubStep(c *accounting.Counter, model *big.Int, i int, op counterStep) (msg string, applied bool) {
	before := c.Load()
	err := c.Sub(op.N)
	if op.N > before {
		if !errors.Is(err, accounting.ErrUnderflow) || c.Load() != before {
			return fmt.Sprintf("op %d Sub(%d) at %d: want ErrUnderflow and no change, got %v, %d", i, op.N, before, err, c.Load()), false
		}
		return "", false
	}
	if err != nil {
		return fmt.Sprintf("op %d Sub(%d): %v", i, op.N, err), false
	}
	model.Sub(model, bigUint64(op.N))
	return "", true
}

// counterSubOrRepairStep applies step i, a SubOrRepair, to c and model: it
// must report a repair exactly when op.N exceeds the counter, which then
// reads zero. It returns what went wrong, or "".
func counterSubOrRepairStep(c *accounting.Counter, model *big.Int, i int, op counterStep) string {
	before := c.Load()
	repaired := c.SubOrRepair(op.N)
	if repaired != (op.N > before) {
		return fmt.Sprintf("op %d SubOrRepair(%d) at %d reported repaired=%v", i, op.N, before, repaired)
	}
	if repaired {
		model.SetUint64(0)
	} else {
		model.Sub(model, bigUint64(op.N))
	}
	return ""
}

// counterNextStep applies step i, a Next, to c and model: at the top of
// uint64 it must fail with ErrOverflow and change nothing (applied false),
// otherwise hand out the counter plus one. It returns what went wrong, or "".
func counterNextStep(c *accounting.Counter, model *big.Int, i int) (msg string, applied bool) {
	before := c.Load()
	id, err := c.Next()
	if before == math.MaxUint64 {
		if !errors.Is(err, accounting.ErrOverflow) || c.Load() != before {
			return fmt.Sprintf("op %d Next at max: want ErrOverflow and no change, got %d, %v", i, id, err), false
		}
		return "", false
	}
	if err != nil || id != before+1 {
		return fmt.Sprintf("op %d Next at %d = %d, %v; want %d", i, before, id, err, before+1), false
	}
	model.Add(model, big.NewInt(1))
	return "", true
}

func TestAccountingProperties(t *testing.T) {
	props := gopter.NewProperties(propParameters(t, 1000))

	props.Property("checked arithmetic equals math/big or fails with the right sentinel",
		prop.ForAll(func(a, b uint64, x, y, z int) string {
			return checkAccountingArithmetic(a, b, x, y, z)
		}, edgyUint64(), edgyUint64(), edgyInt(), edgyInt(), edgyInt()))

	props.Property("budgets and buckets follow the reference formulas",
		prop.ForAll(func(total, liveFree, resident uint64, n, maxCached int) string {
			return checkBudgets(total, liveFree, resident, n, maxCached)
		}, edgyUint64(), edgyUint64(), edgyUint64(), edgyInt(), edgyInt()))

	props.Property("Counter follows its model; failed calls leave it unchanged",
		prop.ForAll(func(start uint64, ops []counterStep) string {
			return checkCounterOps(start, ops)
		}, edgyUint64(), gen.SliceOf(gen.Struct(reflect.TypeOf(counterStep{}), map[string]gopter.Gen{
			"Kind": gen.IntRange(0, 4),
			"N":    edgyUint64(),
			"Cap":  edgyUint64(),
		}))))

	props.TestingRun(t)
}

// TestGuardedCounterConcurrency: many goroutines reserving and releasing
// against one guarded counter never push it past the budget, and it ends
// equal to the successful reservations minus the releases.
func TestGuardedCounterConcurrency(t *testing.T) {
	params := propParameters(t, 40)
	params.MaxSize = 40
	props := gopter.NewProperties(params)
	errBudget := errors.New("over budget")

	props.Property("reservations never exceed the budget; the total balances",
		prop.ForAll(func(workers int, budget uint64, sizes []uint64) string {
			var used accounting.Counter
			var reserved, released atomic.Uint64
			var over atomic.Bool
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []uint64
					for k, n := range sizes {
						err := used.AddGuarded(n, func(next uint64) error {
							if next > budget {
								return errBudget
							}
							return nil
						})
						if err == nil {
							reserved.Add(n)
							mine = append(mine, n)
						}
						if used.Load() > budget {
							over.Store(true)
						}
						// Release an earlier reservation now and then so
						// reservations keep competing for freed room.
						if (k+w)%3 == 2 && len(mine) > 0 {
							r := mine[0]
							mine = mine[1:]
							if used.Sub(r) == nil {
								released.Add(r)
							}
						}
					}
				}()
			}
			wg.Wait()
			switch {
			case over.Load():
				return "the counter exceeded the budget"
			case used.Load() != reserved.Load()-released.Load():
				return fmt.Sprintf("counter %d, reserved %d - released %d", used.Load(), reserved.Load(), released.Load())
			}
			return ""
		}, gen.IntRange(2, 16), gen.UInt64Range(0, 256), gen.SliceOf(gen.UInt64Range(0, 64))))

	props.TestingRun(t)
}
