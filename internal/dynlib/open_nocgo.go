//go:build !cgo

package dynlib

// HaveCgo reports whether Open can load anything: false in binaries built
// with CGO_ENABLED=0.
const HaveCgo = false

// DL is a library opened with dlopen; without cgo there is none.
type DL struct{}

// Open cannot load anything without cgo: it returns an *OpenError.
func Open(path string) (*DL, error) {
	return nil, &OpenError{Path: path, Reason: "this binary was built without cgo"}
}

// Lookup is never reached without cgo: Open returns no DL.
func (l *DL) Lookup(name string) (uintptr, error) {
	return 0, &OpenError{Path: name, Reason: "this binary was built without cgo"}
}
