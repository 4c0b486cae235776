package proptest

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/fusion"
)

// The fusion model: device memory is a map from (handle, address) to byte,
// and the expected fused ranges are the connected fuseComponents of the
// requests' non-empty intervals, per handle, where touching counts as
// connected.

type fuseCell struct{ handle, addr uint64 }

type fuseSpan struct{ handle, start, end uint64 }

// fuseComponents returns the per-handle unions of the given non-empty
// intervals, ordered by handle and start, each maximal: no two of one
// handle overlap or touch.
func fuseComponents(spans []fuseSpan) []fuseSpan {
	sorted := slices.Clone(spans)
	slices.SortFunc(sorted, func(a, b fuseSpan) int {
		if a.handle != b.handle {
			return cmpUint64(a.handle, b.handle)
		}
		return cmpUint64(a.start, b.start)
	})
	var out []fuseSpan
	for _, s := range sorted {
		if n := len(out); n > 0 && out[n-1].handle == s.handle && s.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func applyUploads(copies []fusion.UploadCopy) map[fuseCell]byte {
	mem := map[fuseCell]byte{}
	for _, c := range copies {
		for j, b := range c.Data {
			mem[fuseCell{c.Handle, c.Dst + uint64(j)}] = b
		}
	}
	return mem
}

// sameData reports whether a and b are the same slice: same first element
// and length (aliasing, not equal contents).
func sameData(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func cloneUploads(in []fusion.UploadCopy) []fusion.UploadCopy {
	out := slices.Clone(in)
	for i := range out {
		out[i].Data = slices.Clone(in[i].Data)
	}
	return out
}

// checkUploads runs FuseUploads on copies and checks every statement of its
// contract against the model; it returns "" or what went wrong.
func checkUploads(copies []fusion.UploadCopy) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("FuseUploads panicked: %v", r)
		}
	}()
	before := cloneUploads(copies)
	headers := slices.Clone(copies)
	fused, n, err := fusion.FuseUploads(copies)

	for i := range copies {
		if copies[i].Handle != headers[i].Handle || copies[i].Dst != headers[i].Dst ||
			!sameData(copies[i].Data, headers[i].Data) || !slices.Equal(copies[i].Data, before[i].Data) {
			return fmt.Sprintf("request %d was modified", i)
		}
	}

	var spans []fuseSpan
	var requested uint64
	wantOverflow := false
	for _, c := range copies {
		if len(c.Data) == 0 {
			continue
		}
		if uint64(len(c.Data)) > math.MaxUint64-c.Dst {
			wantOverflow = true
			continue
		}
		spans = append(spans, fuseSpan{c.Handle, c.Dst, c.Dst + uint64(len(c.Data))})
		requested += uint64(len(c.Data))
	}
	if wantOverflow {
		if !errors.Is(err, accounting.ErrOverflow) || fused != nil || n != 0 {
			return fmt.Sprintf("want ErrOverflow with no result, got err=%v fused=%d bytes=%d", err, len(fused), n)
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("unexpected error: %v", err)
	}

	if !reflect.DeepEqual(applyUploads(copies), applyUploads(fused)) {
		return "applying the fused copies gives different memory than applying the requests in order"
	}
	comps := fuseComponents(spans)
	if len(fused) != len(comps) {
		return fmt.Sprintf("got %d fused copies, want one per connected same-handle range: %d", len(fused), len(comps))
	}
	var moved uint64
	for j, f := range fused {
		c := comps[j]
		if f.Handle != c.handle || f.Dst != c.start || uint64(len(f.Data)) != c.end-c.start {
			return fmt.Sprintf("fused copy %d is handle %d [%d, %d), want handle %d [%d, %d)",
				j, f.Handle, f.Dst, f.Dst+uint64(len(f.Data)), c.handle, c.start, c.end)
		}
		if len(f.Data) == 0 {
			return fmt.Sprintf("fused copy %d is empty", j)
		}
		if j > 0 && fused[j-1].Handle == f.Handle && f.Dst <= fused[j-1].Dst+uint64(len(fused[j-1].Data)) {
			return fmt.Sprintf("fused copies %d and %d of handle %d are still mergeable", j-1, j, f.Handle)
		}
		moved += uint64(len(f.Data))
		// The request issued last inside this range wins every byte it
		// writes; when it covers the range, the result must be its slice.
		last := -1
		for i, r := range copies {
			if len(r.Data) > 0 && r.Handle == c.handle && r.Dst >= c.start && r.Dst < c.end {
				last = i
			}
		}
		if r := copies[last]; r.Dst == c.start && uint64(len(r.Data)) == c.end-c.start && !sameData(f.Data, r.Data) {
			return fmt.Sprintf("fused copy %d is fully covered by request %d but does not alias its Data", j, last)
		}
	}
	if n != moved || n > requested {
		return fmt.Sprintf("bytes = %d, fused copies move %d, requested %d", n, moved, requested)
	}
	return ""
}

// fuseDeviceByte is the simulated device's content at (handle, addr).
func fuseDeviceByte(handle, addr uint64) byte {
	return byte(handle*131 + addr*7 + addr>>8)
}

// checkReadbacks runs FuseReadbacks on reqs and checks every statement of
// its contract against the model; it returns "" or what went wrong.
func checkReadbacks(reqs []fusion.ReadbackCopy) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("FuseReadbacks panicked: %v", r)
		}
	}()
	before := slices.Clone(reqs)
	got, err := fusion.FuseReadbacks(reqs)
	if !slices.Equal(before, reqs) {
		return "the requests were modified"
	}

	if msg, found := checkInvalidReadbacks(reqs, got, err); found {
		return msg
	}
	comps := fuseComponents(readbackSpans(reqs))
	union, tooLong := readbackUnion(comps)
	if tooLong || !union.IsUint64() {
		// A fused copy must fit an int length and the total a uint64.
		if !errors.Is(err, accounting.ErrOverflow) || !reflect.DeepEqual(got, fusion.FusedReadbacks{}) {
			return fmt.Sprintf("fused ranges too long (union %s): want ErrOverflow and a zero result, got %v", union, err)
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("unexpected error: %v", err)
	}
	if len(got.Copies) != len(comps) {
		return fmt.Sprintf("got %d copies, want one per connected same-handle range: %d", len(got.Copies), len(comps))
	}
	// Perform the copies into one staging buffer, as a caller would, when
	// the bytes are few enough to hold; the structural checks below already
	// pin every view to its request's bytes for larger ones.
	materialize := union.Uint64() <= 1<<20
	staging, starts, msg := stageReadbackCopies(got, comps, materialize)
	if msg != "" {
		return msg
	}
	if got.Bytes != union.Uint64() {
		return fmt.Sprintf("Bytes = %d, want the handle-scoped union %d", got.Bytes, union)
	}
	if len(got.Views) != len(reqs) {
		return fmt.Sprintf("got %d views for %d requests", len(got.Views), len(reqs))
	}
	return checkReadbackViews(reqs, got, staging, starts, materialize)
}

// checkInvalidReadbacks finds the first request with a negative length or a
// range past the top of the address space; found is false when there is
// none. For one, it checks FuseReadbacks refused it with the matching
// error and a zero result.
func checkInvalidReadbacks(reqs []fusion.ReadbackCopy, got fusion.FusedReadbacks, err error) (msg string, found bool) {
	for i, r := range reqs {
		if r.Len < 0 || r.Len > 0 && uint64(r.Len) > math.MaxUint64-r.Src {
			want := accounting.ErrOverflow
			if r.Len < 0 {
				want = accounting.ErrNegative
			}
			if !errors.Is(err, want) || !reflect.DeepEqual(got, fusion.FusedReadbacks{}) {
				return fmt.Sprintf("request %d (%+v): want %v and a zero result, got err=%v result=%+v", i, r, want, err, got), true
			}
			return "", true
		}
	}
	return "", false
}

// readbackSpans is the device range each non-empty request reads.
func readbackSpans(reqs []fusion.ReadbackCopy) []fuseSpan {
	var spans []fuseSpan
	for _, r := range reqs {
		if r.Len > 0 {
			spans = append(spans, fuseSpan{r.Handle, r.Src, r.Src + uint64(r.Len)})
		}
	}
	return spans
}

// readbackUnion totals the lengths of comps exactly, and reports whether any
// one of them is too long for an int.
func readbackUnion(comps []fuseSpan) (union *big.Int, tooLong bool) {
	union = new(big.Int)
	for _, c := range comps {
		union.Add(union, new(big.Int).SetUint64(c.end-c.start))
		tooLong = tooLong || c.end-c.start > math.MaxInt
	}
	return union, tooLong
}

// stageReadbackCopies checks each fused copy is the matching component of
// the requests, and when materialize is set appends its device bytes to one
// staging buffer; starts holds where each copy begins in it. msg says what
// went wrong, or is "".
func stageReadbackCopies(got fusion.FusedReadbacks, comps []fuseSpan, materialize bool) (staging []byte, starts []int, msg string) {
	starts = make([]int, len(got.Copies))
	for j, c := range got.Copies {
		want := comps[j]
		if c.Handle != want.handle || c.Src != want.start || uint64(c.Len) != want.end-want.start {
			return nil, nil, fmt.Sprintf("copy %d is %+v, want handle %d [%d, %d)", j, c, want.handle, want.start, want.end)
		}
		starts[j] = len(staging)
		for a := c.Src; materialize && a < c.Src+uint64(c.Len); a++ {
			staging = append(staging, fuseDeviceByte(c.Handle, a))
		}
	}
	return staging, starts, ""
}

// checkReadbackViews checks every request's view: empty requests have none,
// the others point inside a copy of the same handle at the request's own
// range and, when the copies were staged, read the request's device bytes.
func checkReadbackViews(reqs []fusion.ReadbackCopy, got fusion.FusedReadbacks, staging []byte, starts []int, materialize bool) string {
	for i, r := range reqs {
		v := got.Views[i]
		if r.Len == 0 {
			if v != (fusion.ReadbackView{Slot: -1}) {
				return fmt.Sprintf("zero-length request %d has view %+v", i, v)
			}
			continue
		}
		if v.Slot < 0 || v.Slot >= len(got.Copies) || v.Len != r.Len || v.Offset < 0 {
			return fmt.Sprintf("request %d (%+v) has view %+v", i, r, v)
		}
		c := got.Copies[v.Slot]
		if c.Handle != r.Handle || c.Src+uint64(v.Offset) != r.Src || v.Offset+v.Len > c.Len {
			return fmt.Sprintf("request %d (%+v) has view %+v into copy %+v", i, r, v, c)
		}
		if !materialize {
			continue
		}
		view := staging[starts[v.Slot]+v.Offset : starts[v.Slot]+v.Offset+v.Len]
		for k, b := range view {
			if b != fuseDeviceByte(r.Handle, r.Src+uint64(k)) {
				return fmt.Sprintf("request %d reads a wrong byte at offset %d", i, k)
			}
		}
	}
	return ""
}

// uploadSpec is the generated shape of one upload: a few handles and a
// small address range so overlaps and touches are common. Dst is widened
// near the top of the address space when overflow is being tested.
type uploadSpec struct {
	Handle uint64
	Dst    uint64
	Len    int
	Fill   uint8
}

func uploadSpecGen(dst gopter.Gen) gopter.Gen {
	return gen.Struct(reflect.TypeOf(uploadSpec{}), map[string]gopter.Gen{
		"Handle": gen.UInt64Range(1, 3),
		"Dst":    dst,
		"Len":    gen.IntRange(0, 12),
		"Fill":   gen.UInt8(),
	})
}

// uploadsFrom builds the copies. Every request's bytes differ from its
// neighbours' so a wrong overwrite order shows up in the model.
func uploadsFrom(specs []uploadSpec) []fusion.UploadCopy {
	out := make([]fusion.UploadCopy, len(specs))
	for i, s := range specs {
		var data []byte
		if s.Len > 0 || s.Fill%2 == 0 {
			data = make([]byte, s.Len) // an empty non-nil slice half the time
		}
		for j := range data {
			data[j] = byte(i*37+j*11) ^ s.Fill
		}
		out[i] = fusion.UploadCopy{Handle: s.Handle, Dst: s.Dst, Data: data}
	}
	return out
}

func sortUploads(copies []fusion.UploadCopy) {
	slices.SortStableFunc(copies, func(a, b fusion.UploadCopy) int {
		if a.Handle != b.Handle {
			return cmpUint64(a.Handle, b.Handle)
		}
		return cmpUint64(a.Dst, b.Dst)
	})
}

type readbackSpec struct {
	Handle uint64
	Src    uint64
	Len    int
}

func readbackSpecGen(src gopter.Gen, length gopter.Gen) gopter.Gen {
	return gen.Struct(reflect.TypeOf(readbackSpec{}), map[string]gopter.Gen{
		"Handle": gen.UInt64Range(1, 3),
		"Src":    src,
		"Len":    length,
	})
}

func readbacksFrom(specs []readbackSpec) []fusion.ReadbackCopy {
	out := make([]fusion.ReadbackCopy, len(specs))
	for i, s := range specs {
		out[i] = fusion.ReadbackCopy{Handle: s.Handle, Src: s.Src, Len: s.Len}
	}
	return out
}

func sortReadbacks(reqs []fusion.ReadbackCopy) {
	slices.SortStableFunc(reqs, func(a, b fusion.ReadbackCopy) int {
		if a.Handle != b.Handle {
			return cmpUint64(a.Handle, b.Handle)
		}
		return cmpUint64(a.Src, b.Src)
	})
}

// nearTop generates addresses that are mostly small and sometimes within a
// few bytes of the top of the 64-bit address space.
func nearTop(small uint64) gopter.Gen {
	return gen.Frequency(map[int]gopter.Gen{
		9: gen.UInt64Range(0, small),
		1: gen.UInt64Range(math.MaxUint64-16, math.MaxUint64),
	})
}

func TestFuseUploadsProperties(t *testing.T) {
	// MaxSize above the radix threshold so both sort paths run.
	params := propParameters(t, 400)
	props := gopter.NewProperties(params)
	small := uploadSpecGen(gen.UInt64Range(0, 40))

	props.Property("ordered overwrite, same-handle fuseComponents, bytes, aliasing, input untouched",
		prop.ForAll(func(specs []uploadSpec) string {
			return checkUploads(uploadsFrom(specs))
		}, gen.SliceOf(small)))

	props.Property("sorted input: same contract",
		prop.ForAll(func(specs []uploadSpec) string {
			copies := uploadsFrom(specs)
			sortUploads(copies)
			return checkUploads(copies)
		}, gen.SliceOf(small)))

	props.Property("a later copy covering a whole range replaces it without copying",
		prop.ForAll(func(specs []uploadSpec, pick int) string {
			copies := uploadsFrom(specs)
			var spans []fuseSpan
			for _, c := range copies {
				if len(c.Data) > 0 {
					spans = append(spans, fuseSpan{c.Handle, c.Dst, c.Dst + uint64(len(c.Data))})
				}
			}
			comps := fuseComponents(spans)
			if len(comps) == 0 {
				return ""
			}
			c := comps[pick%len(comps)]
			cover := fusion.UploadCopy{Handle: c.handle, Dst: c.start, Data: make([]byte, c.end-c.start)}
			copies = append(copies, cover)
			fused, n, err := fusion.FuseUploads(copies)
			if err != nil {
				return err.Error()
			}
			for _, f := range fused {
				if f.Handle == c.handle && f.Dst == c.start {
					if !sameData(f.Data, cover.Data) {
						return "the covered range was copied instead of aliasing the covering request"
					}
					if n > requestedBytes(copies) {
						return "bytes exceed the requested bytes"
					}
					return checkUploads(copies)
				}
			}
			return "the covered range is missing from the result"
		}, gen.SliceOf(small), gen.IntRange(0, 1000)))

	props.Property("addresses near the top: an overflow error, never a panic",
		prop.ForAll(func(specs []uploadSpec) string {
			return checkUploads(uploadsFrom(specs))
		}, gen.SliceOf(uploadSpecGen(nearTop(40)))))

	props.Property("distinct handles never merge even when addresses touch",
		prop.ForAll(func(n int) string {
			copies := make([]fusion.UploadCopy, n)
			for i := range copies {
				copies[i] = fusion.UploadCopy{Handle: uint64(i + 1), Dst: uint64(i) * 4, Data: []byte{1, 2, 3, 4}}
			}
			fused, _, err := fusion.FuseUploads(copies)
			if err != nil || len(fused) != n {
				return fmt.Sprintf("%d touching handles gave %d copies (err %v)", n, len(fused), err)
			}
			return checkUploads(copies)
		}, gen.IntRange(1, 100)))

	props.TestingRun(t)
}

func requestedBytes(copies []fusion.UploadCopy) uint64 {
	var n uint64
	for _, c := range copies {
		n += uint64(len(c.Data))
	}
	return n
}

func TestFuseReadbacksProperties(t *testing.T) {
	params := propParameters(t, 400)
	props := gopter.NewProperties(params)
	small := readbackSpecGen(gen.UInt64Range(0, 40), gen.IntRange(0, 12))

	props.Property("views in request order read exactly their bytes; copies are the union",
		prop.ForAll(func(specs []readbackSpec) string {
			return checkReadbacks(readbacksFrom(specs))
		}, gen.SliceOf(small)))

	props.Property("sorted input allocates only its views and copies (no scratch, no sort)",
		prop.ForAll(func(specs []readbackSpec) string {
			reqs := readbacksFrom(specs)
			sortReadbacks(reqs)
			if msg := checkReadbacks(reqs); msg != "" {
				return msg
			}
			got, _ := fusion.FuseReadbacks(reqs)
			want := 0.0
			if len(got.Views) > 0 {
				want++
			}
			if len(got.Copies) > 0 {
				want++
			}
			allocs := testing.AllocsPerRun(5, func() { _, _ = fusion.FuseReadbacks(reqs) })
			if allocs != want {
				return fmt.Sprintf("sorted input allocated %v times, want %v (views and copies only)", allocs, want)
			}
			return ""
		}, gen.SliceOf(small)))

	props.Property("request order does not change the copies",
		prop.ForAll(func(specs []readbackSpec) string {
			reqs := readbacksFrom(specs)
			a, errA := fusion.FuseReadbacks(reqs)
			sortReadbacks(reqs)
			b, errB := fusion.FuseReadbacks(reqs)
			if errA != nil || errB != nil || !reflect.DeepEqual(a.Copies, b.Copies) || a.Bytes != b.Bytes {
				return fmt.Sprintf("shuffled and sorted requests fuse differently: %+v vs %+v", a.Copies, b.Copies)
			}
			return ""
		}, gen.SliceOf(small)))

	props.Property("negative lengths and addresses near the top: errors, never panics",
		prop.ForAll(func(specs []readbackSpec) string {
			return checkReadbacks(readbacksFrom(specs))
		}, gen.SliceOf(readbackSpecGen(nearTop(40), gen.Frequency(map[int]gopter.Gen{
			19: gen.IntRange(0, 12),
			1:  gen.IntRange(math.MinInt, -1),
		})))))

	props.TestingRun(t)
}
