package sim

import "strconv"

// Op names one Driver (or HostKernelBinder) method, for call counters and
// fault injection.
type Op int

// The operations, one per method of driver.Driver, driver.HostKernelBinder,
// driver.GraphDriver, driver.PeerDriver, driver.PeerAttributeReporter,
// driver.CollectiveDriver, driver.Communicator and driver.PageableCopier.
const (
	OpInfo Op = iota
	OpMemGetInfo
	OpMemAlloc
	OpMemFree
	OpHostAlloc
	OpHostFree
	OpHostRegister
	OpHostUnregister
	OpStreamCreate
	OpStreamDestroy
	OpStreamSynchronize
	OpStreamQuery
	OpStreamWaitEvent
	OpEventCreate
	OpEventRecord
	OpEventQuery
	OpEventSynchronize
	OpEventElapsed
	OpEventDestroy
	OpMemcpyHtoDAsync
	OpMemcpyDtoHAsync
	OpMemcpyDtoDAsync
	OpMemsetD8Async
	OpModuleLoad
	OpModuleUnload
	OpModuleFunction
	OpLaunch
	OpBindHostKernel
	OpPeerLink
	OpEnablePeerAccess
	OpMemcpyPeerAsync
	OpNewCommunicators
	OpNewCommID
	OpJoinCommunicator
	OpGroupStart
	OpGroupEnd
	OpAllReduce
	OpBroadcast
	OpAllGather
	OpReduceScatter
	OpCommDestroy
	OpStreamBeginCapture
	OpStreamEndCapture
	OpGraphInstantiate
	OpGraphLaunch
	OpGraphExecDestroy
	OpGraphDestroy
	OpMemcpyHtoD
	OpMemcpyDtoH
	// OpLaunchProgrammatic is a launch that LaunchBatch queues with
	// driver.Launch.Programmatic set, counted before it is also counted as
	// OpLaunch; it runs exactly as any launch does.
	OpLaunchProgrammatic
	OpGraphUpload
	OpPeerAttributes

	numOps // the number of Driver operations; helpers below are not counted

	opReadDevice  // ReadDevice, named in errors only
	opWriteDevice // WriteDevice, named in errors only
)

var opNames = [...]string{
	OpInfo:               "Info",
	OpMemGetInfo:         "MemGetInfo",
	OpMemAlloc:           "MemAlloc",
	OpMemFree:            "MemFree",
	OpHostAlloc:          "HostAlloc",
	OpHostFree:           "HostFree",
	OpHostRegister:       "HostRegister",
	OpHostUnregister:     "HostUnregister",
	OpStreamCreate:       "StreamCreate",
	OpStreamDestroy:      "StreamDestroy",
	OpStreamSynchronize:  "StreamSynchronize",
	OpStreamQuery:        "StreamQuery",
	OpStreamWaitEvent:    "StreamWaitEvent",
	OpEventCreate:        "EventCreate",
	OpEventRecord:        "EventRecord",
	OpEventQuery:         "EventQuery",
	OpEventSynchronize:   "EventSynchronize",
	OpEventElapsed:       "EventElapsed",
	OpEventDestroy:       "EventDestroy",
	OpMemcpyHtoDAsync:    "MemcpyHtoDAsync",
	OpMemcpyDtoHAsync:    "MemcpyDtoHAsync",
	OpMemcpyDtoDAsync:    "MemcpyDtoDAsync",
	OpMemsetD8Async:      "MemsetD8Async",
	OpModuleLoad:         "ModuleLoad",
	OpModuleUnload:       "ModuleUnload",
	OpModuleFunction:     "ModuleFunction",
	OpLaunch:             "Launch",
	OpBindHostKernel:     "BindHostKernel",
	OpPeerLink:           "PeerLink",
	OpEnablePeerAccess:   "EnablePeerAccess",
	OpMemcpyPeerAsync:    "MemcpyPeerAsync",
	OpNewCommunicators:   "NewCommunicators",
	OpNewCommID:          "NewCommID",
	OpJoinCommunicator:   "JoinCommunicator",
	OpGroupStart:         "GroupStart",
	OpGroupEnd:           "GroupEnd",
	OpAllReduce:          "AllReduce",
	OpBroadcast:          "Broadcast",
	OpAllGather:          "AllGather",
	OpReduceScatter:      "ReduceScatter",
	OpCommDestroy:        "CommDestroy",
	opReadDevice:         "ReadDevice",
	opWriteDevice:        "WriteDevice",
	OpStreamBeginCapture: "StreamBeginCapture",
	OpStreamEndCapture:   "StreamEndCapture",
	OpGraphInstantiate:   "GraphInstantiate",
	OpGraphLaunch:        "GraphLaunch",
	OpGraphExecDestroy:   "GraphExecDestroy",
	OpGraphDestroy:       "GraphDestroy",
	OpMemcpyHtoD:         "MemcpyHtoD",
	OpMemcpyDtoH:         "MemcpyDtoH",
	OpLaunchProgrammatic: "LaunchProgrammatic",
	OpGraphUpload:        "GraphUpload",
	OpPeerAttributes:     "PeerAttributes",
}

// String returns the method name the Op stands for, e.g. "MemAlloc".
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

func (o Op) valid() bool { return o >= 0 && o < numOps }

// Ops returns every operation in declaration order, for tests that loop over
// all of them.
func Ops() []Op {
	all := make([]Op, numOps)
	for i := range all {
		all[i] = Op(i)
	}
	return all
}
