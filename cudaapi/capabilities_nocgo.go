//go:build !cgo

package cudaapi

// featureTable is empty without cgo: DriverCapabilities fails first with
// ErrDriverNotFound.
func featureTable() [numFeatures]featureNeeds { return [numFeatures]featureNeeds{} }
