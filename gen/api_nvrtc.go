package main

// nvrtcLibrary is NVIDIA's runtime compiler (libnvrtc, nvrtc.h), bound into
// package nvrtcapi. nvrtc.h has no version macro, so the since versions below
// (the CUDA toolkit whose NVRTC introduced each entry point) are not checked
// against the header; an entry the header lacks is generated from its proto.
var nvrtcLibrary = library{
	name:      "nvrtc",
	header:    "nvrtc.h",
	headerEnv: "NVRTC_H",
	prefix:    "nvrtc",
	runtime:   "an NVRTC from",
	status:    nvrtcTypes[0],
	success:   "NVRTC_SUCCESS",

	entries: nvrtcEntries,
	types:   nvrtcTypes,

	loader:   "nvrtc",
	notFound: "ErrLibraryNotFound",
	files:    [4]string{"znvrtc_result.go", "znvrtc_types.go", "znvrtc_cgo.go", "znvrtc_nocgo.go"},
}

func init() { libraries[nvrtcLibrary.name] = &nvrtcLibrary }

// nvrtcEntries lists the NVRTC entry points nvrtcapi wraps. Buffers the caller
// sizes with a preceding *Size call, and arrays of C strings, are raw
// pointers: nvrtcapi's hand-written layer owns their C memory.
var nvrtcEntries = []entry{
	{name: "nvrtcVersion", since: 7000},
	{name: "nvrtcGetNumSupportedArchs", since: 11020, proto: "int *numArchs"},
	{name: "nvrtcGetSupportedArchs", since: 11020, roles: roles{"supportedArchs": raw()}, proto: "int *supportedArchs"},
	{name: "nvrtcCreateProgram", since: 7000, roles: roles{"headers": raw(), "includeNames": raw()}},
	{name: "nvrtcDestroyProgram", since: 7000, roles: roles{"prog": raw()}},
	{name: "nvrtcCompileProgram", since: 7000, roles: roles{"options": raw()}},
	{name: "nvrtcGetPTXSize", since: 7000},
	{name: "nvrtcGetPTX", since: 7000, roles: roles{"ptx": raw()}},
	{name: "nvrtcGetCUBINSize", since: 11010, proto: "nvrtcProgram prog, size_t *cubinSizeRet"},
	{name: "nvrtcGetCUBIN", since: 11010, roles: roles{"cubin": raw()}, proto: "nvrtcProgram prog, char *cubin"},
	{name: "nvrtcGetProgramLogSize", since: 7000},
	{name: "nvrtcGetProgramLog", since: 7000, roles: roles{"log": raw()}},
	{name: "nvrtcAddNameExpression", since: 8000},
	{name: "nvrtcGetLoweredName", since: 8000},
}

// nvrtcTypes is nvrtc.h's C-to-Go type table; the status type comes first.
var nvrtcTypes = []typeRule{
	{c: "nvrtcResult", goTyp: "Result", abi: "int", enum: true},
	{c: "nvrtcProgram", goTyp: "Program", class: classHandle, decl: "uintptr",
		doc: "Program is an opaque NVRTC program handle (nvrtcProgram). Zero is no program."},
	{c: "size_t", goTyp: "uint64", abi: "size_t"},
}
