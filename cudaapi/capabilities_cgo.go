//go:build cgo

package cudaapi

// procGraphConditionalHandleCreate only tells whether the driver has
// conditional graph nodes; it has no wrapper yet.
var procGraphConditionalHandleCreate = driver.NewProc(12030, "cuGraphConditionalHandleCreate")

// featureTable lists, per Feature, the driver version and the symbols it needs.
func featureTable() [numFeatures]featureNeeds {
	return [numFeatures]featureNeeds{
		FeatureBatchedCopies: {13000, []*proc{procMemcpyBatchAsync}},
		FeatureMemoryPools: {11020, []*proc{procMemAllocAsync, procMemFreeAsync, procMemAllocFromPoolAsync,
			procDeviceGetDefaultMemPool, procMemPoolCreate, procMemPoolDestroy, procMemPoolSetAttribute,
			procMemPoolGetAttribute, procMemPoolTrimTo}},
		FeatureGraphs: {11040, []*proc{procStreamBeginCapture, procStreamEndCapture, procStreamIsCapturing,
			procGraphCreate, procGraphDestroy, procGraphInstantiateWithFlags, procGraphUpload, procGraphLaunch,
			procGraphExecDestroy}},
		FeatureConditionalGraphNodes: {12030, []*proc{procGraphConditionalHandleCreate}},
		FeatureVirtualMemory: {10020, []*proc{procMemAddressReserve, procMemAddressFree, procMemCreate,
			procMemRelease, procMemMap, procMemUnmap, procMemSetAccess, procMemGetAllocationGranularity}},
		FeaturePeerAccess: {4000, []*proc{procDeviceCanAccessPeer, procCtxEnablePeerAccess, procCtxDisablePeerAccess,
			procMemcpyPeerAsync}},
		FeatureProgrammaticLaunch: {12030, []*proc{procLaunchKernelEx}},
	}
}
