package core

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/vyre-go/vyrecuda/ncclapi"
)

var _ CollectiveDriver = (*cudaDriver)(nil)

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
// its Fix; anything else keeps the ncclapi.Result for errors.As.
func ncclError(call string, err error) error {
	if errors.Is(err, ncclapi.ErrLibraryNotFound) {
		fix, cause := splitFix(err)
		if fix == "" {
			fix = "build with cgo and install NCCL 2 (libnccl.so.2), or set VYRECUDA_LIBNCCL to its path"
		}
		return &Error{Op: call, Kind: KindUnsupported, Detail: "the NCCL library could not be loaded", Err: cause, Fix: fix}
	}
	return fmt.Errorf("%s: %w", call, err)
}

// ncclDataType maps a DataType to NCCL's.
var ncclDataType = [...]ncclapi.DataType{
	DataInt8: ncclapi.Int8, DataUint8: ncclapi.Uint8, DataInt32: ncclapi.Int32, DataUint32: ncclapi.Uint32,
	DataInt64: ncclapi.Int64, DataUint64: ncclapi.Uint64, DataFloat16: ncclapi.Float16, DataFloat32: ncclapi.Float32,
	DataFloat64: ncclapi.Float64, DataBFloat16: ncclapi.BFloat16,
}

// ncclRedOp maps a ReduceOp to NCCL's.
var ncclRedOp = [...]ncclapi.RedOp{ReduceSum: ncclapi.Sum, ReduceProd: ncclapi.Prod, ReduceMax: ncclapi.Max,
	ReduceMin: ncclapi.Min, ReduceAvg: ncclapi.Avg}

// NewCommunicators builds one NCCL communicator per driver with
// ncclCommInitAll over their devices, which must be distinct.
func (d *cudaDriver) NewCommunicators(drivers []Driver) ([]Communicator, error) {
	const call = "ncclCommInitAll"
	devs := make([]*cudaDriver, len(drivers))
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
	if err := d.begin(); err != nil {
		return nil, err
	}
	err := ncclapi.CommInitAll(comms, list)
	d.end()
	if err != nil {
		return nil, ncclError(call, err)
	}
	out := make([]Communicator, len(comms))
	for i, c := range comms {
		out[i] = &ncclComm{d: devs[i], c: c, rank: i, size: len(comms)}
	}
	return out, nil
}

// NewCommID returns a fresh ncclUniqueId.
func (d *cudaDriver) NewCommID() (CommID, error) {
	ncclSetup()
	id, err := ncclapi.GetUniqueId()
	if err != nil {
		return CommID{}, ncclError("ncclGetUniqueId", err)
	}
	return CommID(id), nil
}

// JoinCommunicator joins d's device as rank of id (ncclCommInitRank, with
// d's context current); it blocks until every rank has joined.
func (d *cudaDriver) JoinCommunicator(id CommID, nranks, rank int) (Communicator, error) {
	const call = "ncclCommInitRank"
	if nranks < 1 || rank < 0 || rank >= nranks || nranks > 1<<30 {
		return nil, refused(call, fmt.Sprintf("rank %d of %d ranks", rank, nranks), "pass a rank from 0 to nranks-1")
	}
	ncclSetup()
	if err := d.begin(); err != nil {
		return nil, err
	}
	c, err := ncclapi.CommInitRank(int32(nranks), ncclapi.UniqueId(id), int32(rank))
	d.end()
	if err != nil {
		return nil, ncclError(call, err)
	}
	return &ncclComm{d: d, c: c, rank: rank, size: nranks}, nil
}

// GroupStart calls ncclGroupStart. NCCL's group state belongs to the OS
// thread, so the goroutine stays on its thread until GroupEnd.
func (d *cudaDriver) GroupStart() error {
	runtime.LockOSThread()
	if err := ncclapi.GroupStart(); err != nil {
		runtime.UnlockOSThread()
		return ncclError("ncclGroupStart", err)
	}
	return nil
}

// GroupEnd calls ncclGroupEnd, which launches the grouped calls, and lets
// the goroutine leave its thread.
func (d *cudaDriver) GroupEnd() error {
	defer runtime.UnlockOSThread()
	if err := ncclapi.GroupEnd(); err != nil {
		return ncclError("ncclGroupEnd", err)
	}
	return nil
}

// ncclComm is one rank of an NCCL communicator on d's device.
type ncclComm struct {
	d          *cudaDriver
	c          ncclapi.Comm
	rank, size int
}

func (c *ncclComm) Rank() int { return c.rank }
func (c *ncclComm) Size() int { return c.size }

// on runs an NCCL call with the rank's context current.
func (c *ncclComm) on(call string, f func() error) error {
	if err := c.d.begin(); err != nil {
		return err
	}
	err := f()
	c.d.end()
	if err != nil {
		return ncclError(call, err)
	}
	return nil
}

func (c *ncclComm) AllReduce(send, recv uint64, count uint64, dt DataType, op ReduceOp, s Stream) error {
	return c.on("ncclAllReduce", func() error {
		return ncclapi.AllReduce(send, recv, count, ncclDataType[dt], ncclRedOp[op], c.c, ncclapi.Stream(s))
	})
}

func (c *ncclComm) Broadcast(send, recv uint64, count uint64, dt DataType, root int, s Stream) error {
	return c.on("ncclBroadcast", func() error {
		return ncclapi.Broadcast(send, recv, count, ncclDataType[dt], int32(root), c.c, ncclapi.Stream(s))
	})
}

func (c *ncclComm) AllGather(send, recv uint64, count uint64, dt DataType, s Stream) error {
	return c.on("ncclAllGather", func() error {
		return ncclapi.AllGather(send, recv, count, ncclDataType[dt], c.c, ncclapi.Stream(s))
	})
}

func (c *ncclComm) ReduceScatter(send, recv uint64, count uint64, dt DataType, op ReduceOp, s Stream) error {
	return c.on("ncclReduceScatter", func() error {
		return ncclapi.ReduceScatter(send, recv, count, ncclDataType[dt], ncclRedOp[op], c.c, ncclapi.Stream(s))
	})
}

func (c *ncclComm) Destroy() error {
	return c.on("ncclCommDestroy", func() error { return ncclapi.CommDestroy(c.c) })
}

func (c *ncclComm) Abort() error {
	return c.on("ncclCommAbort", func() error { return ncclapi.CommAbort(c.c) })
}
