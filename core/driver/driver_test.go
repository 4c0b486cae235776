package driver_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core/driver"
)

func TestParamTypeNamesAndSizes(t *testing.T) {
	types := []driver.ParamType{driver.ParamBuffer, driver.ParamInt8, driver.ParamInt16, driver.ParamInt32,
		driver.ParamInt64, driver.ParamUint8, driver.ParamUint16, driver.ParamUint32, driver.ParamUint64,
		driver.ParamFloat32, driver.ParamFloat64}
	sizes := []int{8, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8}
	names := []string{"buffer", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"}
	for i, pt := range types {
		assert.Equal(t, sizes[i], pt.Size(), "%v", pt)
		assert.Equal(t, names[i], pt.String())
	}
	assert.Equal(t, "unset", driver.ParamType(0).String())
	assert.Zero(t, driver.ParamType(0).Size())
	assert.Equal(t, "ParamType(12)", driver.ParamType(12).String())
	assert.Zero(t, driver.ParamType(12).Size())
}

// TestKernelArgAccessorsAndSlot: a typed scalar reads back through the
// accessor of its type and fills its slot with its zero-extended bits; an
// untyped u32 reads through U32; a pointer's slot is its address.
func TestKernelArgAccessorsAndSlot(t *testing.T) {
	neg := driver.KernelArg{Type: driver.ParamInt16, Bits: uint64(uint16(0xFFFE)), U32: 0xFFFE}
	assert.Equal(t, int16(-2), neg.Int16())
	assert.Equal(t, uint64(0xFFFE), neg.Slot(), "no sign extension into the slot")

	f := driver.KernelArg{Type: driver.ParamFloat64, Bits: math.Float64bits(-2.25)}
	assert.Equal(t, -2.25, f.Float64())
	assert.Equal(t, math.Float64bits(-2.25), f.Slot())
	f32 := driver.KernelArg{Type: driver.ParamFloat32, Bits: uint64(math.Float32bits(1.5))}
	assert.Equal(t, float32(1.5), f32.Float32())

	i64 := driver.KernelArg{Type: driver.ParamInt64, Bits: uint64(1<<63 | 5)}
	assert.Equal(t, int64(math.MinInt64+5), i64.Int64())
	assert.Equal(t, uint64(1<<63|5), i64.Uint64())
	assert.Equal(t, int8(5), i64.Int8(), "an accessor reads the low bits")

	u := driver.KernelArg{U32: 0xC0FFEE11, Bits: 99}
	assert.Equal(t, uint32(0xC0FFEE11), u.Uint32(), "an untyped scalar is its U32")
	assert.Equal(t, uint64(0xC0FFEE11), u.Slot())
	assert.Equal(t, uint8(0x11), u.Uint8())
	assert.Equal(t, uint16(0xEE11), u.Uint16())
	assert.Equal(t, int32(-0x3F0011EF), u.Int32(), "0xC0FFEE11 as a signed 32-bit value")

	p := driver.KernelArg{Ptr: 0x7000_0000_1000, IsPtr: true, Type: driver.ParamBuffer, Bits: 3}
	assert.Equal(t, uint64(0x7000_0000_1000), p.Slot())
}

func TestCapabilitiesListAndString(t *testing.T) {
	var none driver.Capabilities
	assert.Equal(t, "unknown driver: no optional features", none.String())
	list := none.List()
	assert.Len(t, list, 8)
	for _, f := range list {
		assert.False(t, f.Offered, f.Name)
	}
	c := driver.Capabilities{DriverVersion: 12040, PeerAccess: true, Graphs: true}
	assert.Equal(t, "CUDA 12.4: graphs, peer access", c.String())
}

func TestCollectiveTypes(t *testing.T) {
	sizes := map[driver.DataType]int{driver.DataInt8: 1, driver.DataUint8: 1, driver.DataInt32: 4, driver.DataUint32: 4,
		driver.DataInt64: 8, driver.DataUint64: 8, driver.DataFloat16: 2, driver.DataFloat32: 4, driver.DataFloat64: 8,
		driver.DataBFloat16: 2}
	for dt, n := range sizes {
		assert.True(t, dt.Valid(), "%v", dt)
		assert.Equal(t, n, dt.Size(), "%v", dt)
	}
	assert.Equal(t, "bfloat16", driver.DataBFloat16.String())
	for _, bad := range []driver.DataType{0, driver.DataBFloat16 + 1, -1} {
		assert.False(t, bad.Valid())
		assert.Zero(t, bad.Size())
		assert.Equal(t, "invalid data type", bad.String())
	}
	assert.Equal(t, "avg", driver.ReduceAvg.String())
	assert.True(t, driver.ReduceSum.Valid())
	assert.False(t, driver.ReduceOp(0).Valid())
	assert.Equal(t, "invalid reduction", (driver.ReduceAvg + 1).String())
}

func TestPeerLinkNames(t *testing.T) {
	assert.Equal(t, "none", driver.PeerNone.String())
	assert.Equal(t, "direct", driver.PeerDirect.String())
	assert.Equal(t, "same device", driver.PeerSame.String())
	assert.Equal(t, "unknown link", driver.PeerLink(7).String())
}
