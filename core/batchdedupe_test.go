package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// A batch naming buffers many times (past the pairwise-compare size) holds
// each once: every position still reaches its own buffer, and the in-flight
// count is one unfinished call per buffer.
func TestBatchNamingBuffersManyTimes(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	x, err := b.Alloc(80)
	require.NoError(t, err)
	y, err := b.Alloc(80)
	require.NoError(t, err)
	var batch core.Batch
	for i := range 20 {
		buf, v := x, byte(i)
		if i%2 == 1 {
			buf, v = y, byte(100+i)
		}
		batch.Uploads = append(batch.Uploads, core.UploadAt{Buf: buf, Offset: 4 * i, Data: []byte{v, v, v, v}})
		batch.Reads = append(batch.Reads, core.Range{Buf: buf, Offset: 4 * i, Len: 4})
	}
	p, err := b.RunAsync(batch)
	require.NoError(t, err)
	for _, h := range []core.Buffer{x, y} {
		err := b.Free(h)
		require.ErrorIs(t, err, core.ErrInFlight)
		assert.Contains(t, err.Error(), "(1 unfinished call)")
	}
	out, err := p.AwaitInto(nil)
	require.NoError(t, err)
	for i, got := range out {
		v := byte(i)
		if i%2 == 1 {
			v = byte(100 + i)
		}
		assert.Equal(t, []byte{v, v, v, v}, got, "read %d", i)
	}
	require.NoError(t, b.Free(x))
	require.NoError(t, b.Free(y))
}
