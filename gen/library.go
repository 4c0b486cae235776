package main

import (
	"fmt"
	"sort"
	"strings"
)

// library is everything the generator needs to bind one C library: the header
// to read, the entry table, the type rules and where the output goes. Adding a
// library (nvrtc.h, nccl.h) is one more value in libraries; the parsing,
// classification and emitting code is shared.
type library struct {
	name      string // -lib value, e.g. "driver"
	prefix    string // C name prefix the naming rule strips: "cu" when empty
	header    string // header file name, e.g. "cuda.h"
	headerEnv string // environment variable naming the header, e.g. "CUDA_H"
	// versionMacro is the header's integer version macro (CUDA_VERSION); a
	// header without it is refused. Empty for a header that has none
	// (nvrtc.h): since versions are then not checked against the header.
	versionMacro string
	// versionConst names the Go constant that records versionMacro.
	versionConst string
	// status is the type rule of the C status every entry point returns; its
	// enumerators become the Go error type's constants.
	status  typeRule
	success string // the status enumerator meaning success, e.g. CUDA_SUCCESS
	// statusErr, when set, is the output package's function that turns a
	// failed status into the error a wrapper returns (cudaapi's statusError
	// boxes CUDA_ERROR_NOT_READY once, so polling loops do not allocate);
	// empty returns the status itself.
	statusErr string

	entries        []entry
	types          []typeRule // C-to-Go type table (status first)
	constantEnums  []string   // flag enums emitted as untyped constants
	constantMacros []string   // integer macros emitted as untyped constants

	// loader is the Go expression (in the output package) of the loader the
	// generated procs register with, e.g. "driver".
	loader string
	// notFound is the Go error every wrapper returns when built without cgo.
	notFound string
	// runtime names what a caller must have for an entry point of a given
	// version, in doc comments: "a driver for" gives "It needs a driver for
	// CUDA 12.4 or newer"; empty gives "It needs CUDA 12.4 or newer".
	runtime string
	// files are the output file names, in emit order: status, types, cgo
	// wrappers, no-cgo wrappers.
	files [4]string

	// prelude, when set, is project-written C parsed before the header in
	// place of the system headers named in replaceIncludes, whose #include
	// lines are dropped from the header: for a header that includes headers
	// the generator does not have (nccl.h includes the CUDA runtime's).
	prelude         string
	replaceIncludes []string
	// cDecls is C emitted before the trampolines: stand-ins for the header's
	// struct types that classStruct rules pass by value.
	cDecls string
	// versionName spells one of the library's version numbers ("NCCL
	// 2.28.3"); nil spells CUDA versions ("CUDA 12.4").
	versionName func(v int) string
}

// version spells v in the library's own version scheme.
func (l *library) version(v int) string {
	if l.versionName != nil {
		return l.versionName(v)
	}
	return formatVersion(v)
}

// libraries are the libraries gen knows, by -lib name. To add one (nvrtc.h,
// nccl.h):
//
//  1. write its entry table and type rules (the status typedef first), as
//     api.go and types.go do for the driver;
//  2. add a library value here: header and its environment variable, the
//     version macro (empty when the header has none: since is then not
//     checked), the status rule and success enumerator, the Go loader
//     variable its procs register with, the error its no-cgo wrappers return,
//     and four output file names of its own;
//  3. in cudaapi, declare that loader (&loader{name: "libnvrtc", open: ...,
//     version: -1}) and the status type's Error method, and add a
//     //go:generate line running gen with -lib NAME. A library may live in a
//     package of its own instead: NCCL's bindings are package ncclapi, with
//     its own loader (ncclapi/loader.go) and prelude (api_nccl.go).
var libraries = map[string]*library{
	"driver": &driverLibrary,
	"nccl":   &ncclLibrary,
}

// driverLibrary is the CUDA driver API (libcuda, cuda.h).
var driverLibrary = library{
	name:         "driver",
	header:       "cuda.h",
	headerEnv:    "CUDA_H",
	versionMacro: "CUDA_VERSION",
	versionConst: "HeaderVersion",
	status:       driverTypes[0],
	success:      "CUDA_SUCCESS",
	statusErr:    "statusError",

	entries:        driverEntries,
	types:          driverTypes,
	constantEnums:  constantEnums,
	constantMacros: constantMacros,

	loader:   "driver",
	notFound: "ErrDriverNotFound",
	runtime:  "a driver for",
	files:    [4]string{"zresult.go", "ztypes.go", "zdriver_cgo.go", "zdriver_nocgo.go"},
}

// withEntries returns a copy of l that binds entries instead of its own (tests).
func (l *library) withEntries(entries []entry) *library {
	c := *l
	c.entries = entries
	return &c
}

// libraryNames lists the known -lib values, sorted, for messages.
func libraryNames() string {
	var names []string
	for n := range libraries {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// lookupLibrary finds a library by -lib name.
func lookupLibrary(name string) (*library, error) {
	if l, ok := libraries[name]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("unknown library %q; Fix: pass -lib with one of %s", name, libraryNames())
}

// ruleByTypedef finds the type rule for a C typedef name.
func (l *library) ruleByTypedef(name string) (typeRule, bool) {
	for _, r := range l.types {
		if r.c == name {
			return r, true
		}
	}
	return typeRule{}, false
}
