// Package nvrtcapi is the thin, typed binding to NVRTC, NVIDIA's runtime
// compiler for CUDA C++ (libnvrtc). It owns the generated wrappers
// (znvrtc_*.go), the Result type and its error text, the loader that finds
// libnvrtc at run time, and Compile, which drives one compilation from
// source to image. It holds no policy: no caching and no choice of target;
// package nvrtc owns those.
//
// # Generated wrappers
//
// Each wrapped entry point is one Go function generated from nvrtc.h by
// ../gen (-lib nvrtc): the C name loses its nvrtc prefix (nvrtcCompileProgram
// is CompileProgram). Out-parameters are returned before the error; buffers the
// caller sizes with a *Size call and arrays of C strings are unsafe.Pointer
// and must point to C memory. Every wrapper returns a nil error on
// NVRTC_SUCCESS, a Result otherwise, an error matching ErrLibraryNotFound
// when libnvrtc cannot be loaded, and a *MissingSymbolError when the loaded
// libnvrtc lacks that one symbol. Nothing panics.
//
// # Loading
//
// The first call opens, in order: $VYRECUDA_LIBNVRTC when it is set (an
// explicit choice wins), then libnvrtc.so.13, libnvrtc.so.12 and
// libnvrtc.so.11.2 by the dynamic loader's search path, then the same names
// under $CUDA_HOME/lib64 and /usr/local/cuda/lib64 (the toolkit's usual home,
// often not on the search path). Built with CGO_ENABLED=0 the package compiles
// and every call returns ErrLibraryNotFound.
//
// # Regenerating
//
// The committed files come from CUDA 13.0's nvrtc.h. With a copy of that
// header outside version control:
//
//	make generate NVRTC_H=.cache/cuda/nvrtc.h
package nvrtcapi

//go:generate go run ../gen -lib nvrtc -pkg nvrtcapi -out .
