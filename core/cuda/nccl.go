package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/ncclapi"
)

// ncclEnvOnce sets NCCL's environment before the first communicator.
var ncclEnvOnce sync.Once

// ncclSetup keeps NVLink multicast (NVLS) off unless the caller chose
// otherwise: NVLS needs multicast objects that not every machine (or
// virtual machine) lends, and without it NCCL's other algorithms run.
func ncclSetup() {
	ncclEnvOnce.Do(func() {
		if _, set := os.LookupEnv("NCCL_NVLS_ENABLE"); !set {
			_ = os.Setenv("NCCL_NVLS_ENABLE", "0") // cannot fail for a valid name
		}
	})
}

// ncclError classifies an NCCL failure: no library is KindUnsupported with
// its Fix; anything else keeps the ncclapi.Result for errors.As. A nil err
// stays nil.
func ncclError(call string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ncclapi.ErrLibraryNotFound) {
		fix, cause := splitFix(err)
		if fix == "" {
			fix = "build with cgo and install NCCL 2 (libnccl.so.2), or set VYRECUDA_LIBNCCL to its path"
		}
		return &errs.Error{Op: call, Kind: errs.KindUnsupported, Detail: "the NCCL library could not be loaded", Err: cause, Fix: fix}
	}
	return fmt.Errorf("%s: %w", call, err)
}

// ncclDataType maps a driver.DataType to NCCL's.
var ncclDataType = [...]ncclapi.DataType{
	driver.DataInt8: ncclapi.Int8, driver.DataUint8: ncclapi.Uint8, driver.DataInt32: ncclapi.Int32,
	driver.DataUint32: ncclapi.Uint32, driver.DataInt64: ncclapi.Int64, driver.DataUint64: ncclapi.Uint64,
	driver.DataFloat16: ncclapi.Float16, driver.DataFloat32: ncclapi.Float32, driver.DataFloat64: ncclapi.Float64,
	driver.DataBFloat16: ncclapi.BFloat16,
}

// ncclRedOp maps a driver.ReduceOp to NCCL's.
var ncclRedOp = [...]ncclapi.RedOp{driver.ReduceSum: ncclapi.Sum, driver.ReduceProd: ncclapi.Prod,
	driver.ReduceMax: ncclapi.Max, driver.ReduceMin: ncclapi.Min, driver.ReduceAvg: ncclapi.Avg}

// NewCommunicators builds one NCCL communicator per driver with
// ncclCommInitAll over their devices, which must be distinct.
func (d *Driver) NewCommunicators(drivers []driver.Driver) ([]driver.Communicator, error) {
	const call = "ncclCommInitAll"
	devs := make([]*Driver, len(drivers))
	list := make([]int32, len(drivers))
	seen := map[int]bool{}
	for i, drv := range drivers {
		p, err := d.peerOf(call, drv)
		if err != nil {
			return nil, err
		}
		if seen[p.info.Ordinal] {
			return nil, refused(call, fmt.Sprintf("device %d appears twice", p.info.Ordinal), "pass one driver per device")
		}
		seen[p.info.Ordinal] = true
		devs[i], list[i] = p, int32(p.info.Ordinal)
	}
	ncclSetup()
	comms := make([]ncclapi.Comm, len(drivers))
	if err := d.bound(func() error { return ncclError(call, ncclapi.CommInitAll(comms, list)) }); err != nil {
		return nil, err
	}
	out := make([]driver.Communicator, len(comms))
	for i, c := range comms {
		out[i] = &ncclComm{d: devs[i], c: c, rank: i, size: len(comms)}
	}
	return out, nil
}

// NewCommID returns a fresh ncclUniqueId.
func (d *Driver) NewCommID() (driver.CommID, error) {
	ncclSetup()
	id, err := ncclapi.GetUniqueId()
	if err != nil {
		return driver.CommID{}, ncclError("ncclGetUniqueId", err)
	}
	return driver.CommID(id), nil
}

// JoinCommunicator joins d's device as rank of id (ncclCommInitRank, with
// d's context current); it blocks until every rank has joined.
func (d *Driver) JoinCommunicator(id driver.CommID, nranks, rank int) (driver.Communicator, error) {
	const call = "ncclCommInitRank"
	if nranks < 1 || rank < 0 || rank >= nranks || nranks > 1<<30 {
		return nil, refused(call, fmt.Sprintf("rank %d of %d ranks", rank, nranks), "pass a rank from 0 to nranks-1")
	}
	ncclSetup()
	var c ncclapi.Comm
	err := d.bound(func() error {
		var err error
		c, err = ncclapi.CommInitRank(int32(nranks), ncclapi.UniqueId(id), int32(rank))
		return ncclError(call, err)
	})
	if err != nil {
		return nil, err
	}
	return &ncclComm{d: d, c: c, rank: rank, size: nranks}, nil
}

// GroupStart calls ncclGroupStart. NCCL's group state belongs to the OS
// thread, so the goroutine stays on its thread until GroupEnd.
func (d *Driver) GroupStart() error {
	runtime.LockOSThread()
	if err := ncclapi.GroupStart(); err != nil {
		runtime.UnlockOSThread()
		return ncclError("ncclGroupStart", err)
	}
	return nil
}

// GroupEnd calls ncclGroupEnd, which launches the grouped calls, and lets
// the goroutine leave its thread.
func (d *Driver) GroupEnd() error {
	defer runtime.UnlockOSThread()
	if err := ncclapi.GroupEnd(); err != nil {
		return ncclError("ncclGroupEnd", err)
	}
	return nil
}

// ncclComm is one rank of an NCCL communicator on d's device.
type ncclComm struct {
	d          *Driver
	c          ncclapi.Comm
	rank, size int
}

// Rank returns this rank.
func (c *ncclComm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *ncclComm) Size() int { return c.size }

// on runs an NCCL call with the rank's context current.
func (c *ncclComm) on(call string, f func() error) error {
	return c.d.bound(func() error { return ncclError(call, f()) })
}

// ncclTypes maps dt and op to NCCL's, refusing values outside the
// driver.Data and driver.Reduce constants; a call without a reduction
// passes ReduceSum.
func ncclTypes(call string, dt driver.DataType, op driver.ReduceOp) (ncclapi.DataType, ncclapi.RedOp, error) {
	if !dt.Valid() || !op.Valid() {
		return 0, 0, refused(call, fmt.Sprintf("data type %d, reduction %d", int(dt), int(op)),
			"pass one of the driver.Data constants and one of the driver.Reduce constants")
	}
	return ncclDataType[dt], ncclRedOp[op], nil
}

// AllReduce queues ncclAllReduce on s.
func (c *ncclComm) AllReduce(send, recv uint64, count uint64, dt driver.DataType, op driver.ReduceOp, s driver.Stream) error {
	const call = "ncclAllReduce"
	t, o, err := ncclTypes(call, dt, op)
	if err != nil {
		return err
	}
	return c.on(call, func() error { return ncclapi.AllReduce(send, recv, count, t, o, c.c, ncclapi.Stream(s)) })
}

// Broadcast queues ncclBroadcast on s.
func (c *ncclComm) Broadcast(send, recv uint64, count uint64, dt driver.DataType, root int, s driver.Stream) error {
	const call = "ncclBroadcast"
	t, _, err := ncclTypes(call, dt, driver.ReduceSum)
	if err != nil {
		return err
	}
	return c.on(call, func() error { return ncclapi.Broadcast(send, recv, count, t, int32(root), c.c, ncclapi.Stream(s)) })
}

// AllGather queues ncclAllGather on s.
func (c *ncclComm) AllGather(send, recv uint64, count uint64, dt driver.DataType, s driver.Stream) error {
	const call = "ncclAllGather"
	t, _, err := ncclTypes(call, dt, driver.ReduceSum)
	if err != nil {
		return err
	}
	return c.on(call, func() error { return ncclapi.AllGather(send, recv, count, t, c.c, ncclapi.Stream(s)) })
}

// ReduceScatter queues ncclReduceScatter on s.
func (c *ncclComm) ReduceScatter(send, recv uint64, count uint64, dt driver.DataType, op driver.ReduceOp, s driver.Stream) error {
	const call = "ncclReduceScatter"
	t, o, err := ncclTypes(call, dt, op)
	if err != nil {
		return err
	}
	return c.on(call, func() error { return ncclapi.ReduceScatter(send, recv, count, t, o, c.c, ncclapi.Stream(s)) })
}

// Destroy releases the communicator once its queued work has finished.
func (c *ncclComm) Destroy() error {
	return c.on("ncclCommDestroy", func() error { return ncclapi.CommDestroy(c.c) })
}

// Abort releases the communicator at once, abandoning its queued work.
func (c *ncclComm) Abort() error {
	return c.on("ncclCommAbort", func() error { return ncclapi.CommAbort(c.c) })
}
