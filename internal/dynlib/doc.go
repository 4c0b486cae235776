// Package dynlib opens shared libraries at run time and resolves their
// symbols lazily, so the API packages (cudaapi, nvrtcapi, ncclapi) build and
// run on machines without the NVIDIA libraries and fail per call instead.
//
// A Loader opens its library once, on the first symbol lookup, and remembers
// the outcome. Each Proc is one symbol (with optional older fallbacks of the
// same C signature); its address, or the failure to find it, is cached, so
// the fast path of Proc.Find is one atomic load. The API packages keep what
// is theirs: the library names, the environment variable, and the error
// types a failure becomes (the Loader's NotFound and Missing hooks).
package dynlib
