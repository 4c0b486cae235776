package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestFreeOfAGraphBufferNamesGraphClose: a buffer an open Graph captured
// is refused by Free and FreeResident with a Fix that names Graph.Close,
// not a Pending the caller never had; with a Pending beside the Graph the
// message names both.
func TestFreeOfAGraphBufferNamesGraphClose(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	g, err := b.Capture(core.Batch{Fills: []core.Fill{{Buf: h, Value: 1}}})
	require.NoError(t, err)
	for op, free := range map[string]func(core.Buffer) error{"Free": b.Free, "FreeResident": b.FreeResident} {
		e := checkError(t, op, free(h))
		assert.Equal(t, core.KindInFlight, e.Kind)
		assert.Contains(t, e.Detail, "1 open Graph(s)", op)
		assert.Contains(t, e.Fix, "Graph.Close", op)
		assert.NotContains(t, e.Error(), "Pending", op)
	}

	p, err := b.RunAsync(core.Batch{Fills: []core.Fill{{Buf: h, Value: 2}}})
	require.NoError(t, err)
	e := checkError(t, "Free", b.Free(h))
	assert.Contains(t, e.Detail, "1 open Graph(s)")
	assert.Contains(t, e.Detail, "1 unfinished call")
	assert.Contains(t, e.Fix, "Graph.Close")
	assert.Contains(t, e.Fix, "Pending")
	require.NoError(t, p.Await())

	require.NoError(t, g.Close())
	require.NoError(t, b.Free(h), "once the Graph is closed nothing holds the buffer")
}

// TestUnknownHandlesSayWhy: a freed buffer, a buffer of another open
// Backend, a buffer of a closed Backend, a handle never handed out and the
// zero Buffer are all ErrUnknownHandle, each with its own text.
func TestUnknownHandlesSayWhy(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	other, _ := openSim(t, sim.Config{})
	gone, _ := openSim(t, sim.Config{})
	freed, err := b.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Free(freed))
	foreign, err := other.Alloc(64)
	require.NoError(t, err)
	closed, err := gone.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, gone.Free(closed))
	require.NoError(t, gone.Close())
	live, err := b.Alloc(64)
	require.NoError(t, err)

	cases := map[string]struct {
		h     core.Buffer
		words string
	}{
		"freed":        {freed, "was freed"},
		"foreign":      {foreign, "belongs to another Backend"},
		"closed":       {closed, "was freed"},
		"never issued": {core.Buffer{ID: live.ID + 1<<40, Len: 64}, "never handed out"},
		"zero":         {core.Buffer{}, "zero Buffer"},
	}
	texts := map[string]string{}
	for name, c := range cases {
		for op, call := range map[string]func() error{
			"Free":     func() error { return b.Free(c.h) },
			"Download": func() error { _, err := b.Download(c.h.All(), nil); return err },
		} {
			e := checkError(t, op, call())
			assert.Equal(t, core.KindUnknownHandle, e.Kind, "%s %s", name, op)
			assert.Contains(t, e.Detail, c.words, "%s %s", name, op)
			if op == "Free" {
				texts[name] = e.Detail + e.Fix
			}
		}
	}
	assert.NotEqual(t, texts["freed"], texts["foreign"], "a freed buffer and another Backend's read alike")
	require.NoError(t, other.Free(foreign))
	require.NoError(t, b.Free(live))
}

// TestRangeErrorsSpeakTheCallersTerms: a negative offset or length, or a
// range past the end, is refused with the numbers and what is wrong with
// them, never the checked arithmetic's internal text, on every call that
// takes a range.
func TestRangeErrorsSpeakTheCallersTerms(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	other, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	oh, err := other.Alloc(64)
	require.NoError(t, err)
	calls := []struct {
		op    string
		call  func() error
		words []string
	}{
		{"Download", func() error { _, err := b.Download(h.Slice(-5, 3), nil); return err }, []string{"offset -5 is negative"}},
		{"Download", func() error { _, err := b.Download(h.Slice(5, -3), nil); return err }, []string{"length -3 is negative"}},
		{"DownloadMany", func() error { _, err := b.DownloadMany([]core.Range{h.Slice(-1, -2)}, nil); return err },
			[]string{"offset -1 and the length -2 are negative"}},
		{"Download", func() error { _, err := b.Download(h.Slice(60, 8), nil); return err }, []string{"only 4 bytes fit after offset 60"}},
		{"Download", func() error { _, err := b.Download(h.Slice(70, 1), nil); return err }, []string{"offset 70 is past the buffer's end at 64"}},
		{"Upload", func() error { return b.Upload(core.UploadAt{Buf: h, Offset: -4, Data: []byte{1}}) }, []string{"offset -4 is negative"}},
		{"UploadAsync", func() error { return b.UploadAsync(core.UploadAt{Buf: h, Offset: -4, Data: []byte{1}}) }, []string{"offset -4 is negative"}},
		{"Run", func() error {
			_, err := b.Run(core.Batch{Uploads: []core.UploadAt{{Buf: h, Offset: -2, Data: []byte{1}}}}, nil)
			return err
		}, []string{"offset -2 is negative"}},
		{"Run", func() error { _, err := b.Run(core.Batch{Reads: []core.Range{h.Slice(-3, 1)}}, nil); return err }, []string{"offset -3 is negative"}},
		{"CopyPeer", func() error {
			return core.CopyPeer(b, other, []core.PeerCopy{{Dst: h, Src: oh, SrcOffset: -8, Len: 4}})
		}, []string{"offset -8 is negative"}},
	}
	for _, c := range calls {
		e := checkError(t, c.op, c.call())
		assert.Equal(t, core.KindInvalidArgument, e.Kind, c.op)
		for _, w := range c.words {
			assert.Contains(t, e.Detail, w, c.op)
		}
		assert.NotContains(t, e.Error(), "accounting", c.op)
		assert.NotContains(t, e.Error(), "RangeEnd", c.op)
	}
	require.NoError(t, b.Free(h))
	require.NoError(t, other.Free(oh))
}

// TestTypedUploadsCountElements: UploadSlice and UploadSliceAt report the
// element counts the caller passed, not bytes, and a short or long whole
// upload's Fix names UploadSliceAt.
func TestTypedUploadsCountElements(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := core.AllocSlice[float32](b, 4)
	require.NoError(t, err)
	e := checkError(t, "UploadSlice", core.UploadSlice(b, h, make([]float32, 5)))
	assert.Contains(t, e.Detail, "holds 4 elements of 4 bytes but got 5 elements")
	// Byte counts stay out (the handle's number may be anything).
	assert.NotContains(t, e.Detail, "16 bytes")
	assert.NotContains(t, e.Detail, "20 bytes")
	assert.Contains(t, e.Fix, "UploadSliceAt")
	assert.NotContains(t, e.Fix, "UploadResidentAt")

	e = checkError(t, "UploadSliceAt", core.UploadSliceAt(b, h, 2, make([]float32, 3)))
	assert.Contains(t, e.Detail, "3 elements at index 2 do not fit its 4 elements")

	odd, err := b.Alloc(6)
	require.NoError(t, err)
	e = checkError(t, "UploadSlice", core.UploadSlice(b, odd, make([]float32, 1)))
	assert.Contains(t, e.Detail, "not a whole number of 4-byte elements")

	e = checkError(t, "UploadSlice", core.UploadSlice(b, odd, make([]byte, 5)))
	assert.Contains(t, e.Detail, "needs exactly 6 bytes but got 5", "one-byte elements are bytes")
	assert.Contains(t, e.Fix, "UploadSliceAt")

	require.NoError(t, core.UploadSliceAt(b, h, 1, []float32{1, 2, 3}))
	got, err := core.DownloadSlice(b, h, []float32(nil))
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3}, got[1:])
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Free(odd))
}
