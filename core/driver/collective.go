package driver

import "context"

// DataType is the element type of a collective operation.
type DataType int

// The element types collectives work on (NCCL's).
const (
	DataInt8 DataType = iota + 1
	DataUint8
	DataInt32
	DataUint32
	DataInt64
	DataUint64
	DataFloat16
	DataFloat32
	DataFloat64
	DataBFloat16
)

var dataTypeInfo = [...]struct {
	name string
	size int
}{
	DataInt8: {"int8", 1}, DataUint8: {"uint8", 1}, DataInt32: {"int32", 4}, DataUint32: {"uint32", 4},
	DataInt64: {"int64", 8}, DataUint64: {"uint64", 8}, DataFloat16: {"float16", 2}, DataFloat32: {"float32", 4},
	DataFloat64: {"float64", 8}, DataBFloat16: {"bfloat16", 2},
}

// Valid reports whether t is one of the DataType constants.
func (t DataType) Valid() bool { return t > 0 && int(t) < len(dataTypeInfo) }

// Size returns the bytes of one element (0 for an invalid DataType).
func (t DataType) Size() int {
	if !t.Valid() {
		return 0
	}
	return dataTypeInfo[t].size
}

// String returns the type's name, e.g. "float32".
func (t DataType) String() string {
	if !t.Valid() {
		return "invalid data type"
	}
	return dataTypeInfo[t].name
}

// ReduceOp is the element-wise reduction of AllReduce and ReduceScatter.
type ReduceOp int

// The reductions (NCCL's).
const (
	ReduceSum ReduceOp = iota + 1
	ReduceProd
	ReduceMax
	ReduceMin
	ReduceAvg // the sum divided by the number of ranks
)

var reduceOpNames = [...]string{ReduceSum: "sum", ReduceProd: "prod", ReduceMax: "max", ReduceMin: "min", ReduceAvg: "avg"}

// Valid reports whether o is one of the ReduceOp constants.
func (o ReduceOp) Valid() bool { return o > 0 && int(o) < len(reduceOpNames) }

// String returns the reduction's name, e.g. "sum".
func (o ReduceOp) String() string {
	if !o.Valid() {
		return "invalid reduction"
	}
	return reduceOpNames[o]
}

// CommID identifies one communicator that ranks in several processes (or
// hosts) join; one rank creates it (NewCommID) and the caller passes it to
// the others by its own means.
type CommID [128]byte

// CollectiveDriver is an optional Driver capability, found by type
// assertion: collective communication among devices (NCCL on real devices,
// Go on simulated ones).
type CollectiveDriver interface {
	// NewCommunicators builds one communicator per driver, rank i on
	// drivers[i], all in this process. The receiver is one of drivers.
	NewCommunicators(drivers []Driver) ([]Communicator, error)
	// NewCommID creates the identifier of a communicator whose ranks join
	// it with JoinCommunicator, from this process or others.
	NewCommID() (CommID, error)
	// JoinCommunicator joins this driver's device as rank of an nranks
	// communicator; it returns once every rank has joined.
	JoinCommunicator(id CommID, nranks, rank int) (Communicator, error)
	// GroupStart and GroupEnd bracket collective calls that one goroutine
	// issues for several ranks, so none of them waits for the others.
	GroupStart() error
	GroupEnd() error
}

// ContextJoiner is an optional CollectiveDriver capability, found by type
// assertion: a join that stops waiting for the other ranks when ctx is
// done. The rank then leaves the communicator as if it had never joined
// (it may join again with the same id), and the error wraps ctx.Err().
type ContextJoiner interface {
	JoinCommunicatorContext(ctx context.Context, id CommID, nranks, rank int) (Communicator, error)
}

// Communicator is one rank's end of a collective communicator. Its calls
// queue work on s, a stream of the rank's driver; addresses are that
// device's. Counts are elements of dt.
type Communicator interface {
	// Rank and Size give this rank and the number of ranks.
	Rank() int
	Size() int
	// AllReduce reduces every rank's count elements at send with op into
	// every rank's recv.
	AllReduce(send, recv uint64, count uint64, dt DataType, op ReduceOp, s Stream) error
	// Broadcast copies root's count elements at send into every rank's recv.
	Broadcast(send, recv uint64, count uint64, dt DataType, root int, s Stream) error
	// AllGather writes rank r's count elements at send to every rank's recv
	// at element r*count.
	AllGather(send, recv uint64, count uint64, dt DataType, s Stream) error
	// ReduceScatter reduces the ranks' Size()*count elements at send with op
	// and writes block r (count elements) into rank r's recv.
	ReduceScatter(send, recv uint64, count uint64, dt DataType, op ReduceOp, s Stream) error
	// Destroy releases the communicator once its queued work has finished.
	Destroy() error
	// Abort releases the communicator at once, abandoning work still queued
	// on it on every rank (which then leaves its recv buffers undefined);
	// the other ranks' communicators become unusable.
	Abort() error
}
