package transfer

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/kernels"
)

// The scatter and gather kernels (core/kernels) run as these Go functions
// on a device that runs host kernels (driver.HostKernelBinder): the
// simulated one.

// ScatterTwin is vyre_scatter on the simulated device: (packed, table, count).
func ScatterTwin(mem driver.KernelMemory, _ driver.LaunchConfig, args []driver.KernelArg) error {
	return packedTwin(kernels.ScatterEntry, mem, args, true)
}

// GatherTwin is vyre_gather on the simulated device: (packed, table, count).
func GatherTwin(mem driver.KernelMemory, _ driver.LaunchConfig, args []driver.KernelArg) error {
	return packedTwin(kernels.GatherEntry, mem, args, false)
}

// packedTwin walks the table as the kernels do: entry {addr, off, len} moves
// len bytes between addr and packed+off, towards addr when scatter is set.
func packedTwin(name string, mem driver.KernelMemory, args []driver.KernelArg, scatter bool) error {
	if len(args) != 3 || !args[0].IsPtr || !args[1].IsPtr || args[2].IsPtr {
		return fmt.Errorf("%s: want parameters (packed pointer, table pointer, u32 count)", name)
	}
	packed, count := args[0].Ptr, int(args[2].U32)
	if count > math.MaxInt/kernels.TableEntryBytes {
		return fmt.Errorf("%s: %d entries overflow", name, count)
	}
	table, err := mem.Bytes(args[1].Ptr, count*kernels.TableEntryBytes)
	if err != nil {
		return fmt.Errorf("%s: table: %w", name, err)
	}
	for e := range count {
		t := table[e*kernels.TableEntryBytes:]
		addr, off, n := binary.LittleEndian.Uint64(t), binary.LittleEndian.Uint64(t[8:]), binary.LittleEndian.Uint64(t[16:])
		if n > math.MaxInt || off > math.MaxUint64-packed {
			return fmt.Errorf("%s: entry %d: %d bytes at packed offset %d overflow", name, e, n, off)
		}
		dev, err := mem.Bytes(addr, int(n))
		if err != nil {
			return fmt.Errorf("%s: entry %d: device side: %w", name, e, err)
		}
		pk, err := mem.Bytes(packed+off, int(n))
		if err != nil {
			return fmt.Errorf("%s: entry %d: packed side: %w", name, e, err)
		}
		if scatter {
			copy(dev, pk)
		} else {
			copy(pk, dev)
		}
	}
	return nil
}
