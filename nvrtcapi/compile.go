package nvrtcapi

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// Header is a source file a compilation can #include by Name, given as text.
type Header struct {
	Name   string
	Source string
}

// Request is one compilation of CUDA C++ source.
type Request struct {
	Source  string   // the program text
	Name    string   // its file name in messages; empty means "program.cu"
	Headers []Header // include files supplied as strings
	Options []string // NVRTC options, e.g. "-arch=sm_90", "--use_fast_math"
	// NameExpressions are expressions naming __global__ functions, such as
	// "saxpy" or "scale<double>"; Output.Lowered holds each one's symbol.
	NameExpressions []string
	// CUBIN asks for a cubin (the options must name a real architecture,
	// -arch=sm_XX); otherwise the output is PTX.
	CUBIN bool
}

// Output is what a successful compilation produced.
type Output struct {
	Image   []byte   // PTX text (NUL-terminated as NVRTC returns it) or cubin
	Log     string   // the compiler's log: warnings, or empty
	Lowered []string // one symbol per Request.NameExpressions entry
}

// CompileError is a compilation NVRTC refused; Log holds the compiler's
// messages, file and line included.
type CompileError struct {
	Err Result // NVRTC_ERROR_COMPILATION, or the failing call's status
	Log string
}

// Error returns the status and the log.
func (e *CompileError) Error() string {
	return fmt.Sprintf("%v: %s", e.Err, strings.TrimSpace(e.Log))
}

// Unwrap returns the status.
func (e *CompileError) Unwrap() error { return e.Err }

// Compile runs one compilation: create the program, add the name
// expressions, compile, read the log, the image and the lowered names, and
// destroy the program. Every C allocation is released on every path.
func Compile(req Request) (Output, error) {
	name := req.Name
	if name == "" {
		name = "program.cu"
	}
	srcs := make([]string, len(req.Headers))
	names := make([]string, len(req.Headers))
	for i, h := range req.Headers {
		srcs[i], names[i] = h.Source, h.Name
	}
	hs, freeH := cStrings(srcs)
	defer freeH()
	hn, freeN := cStrings(names)
	defer freeN()
	prog, err := CreateProgram(req.Source, name, int32(len(req.Headers)), hs, hn)
	if err != nil {
		return Output{}, err
	}
	defer destroy(prog)
	for _, e := range req.NameExpressions {
		if err := AddNameExpression(prog, e); err != nil {
			return Output{}, fmt.Errorf("nvrtcAddNameExpression(%q): %w", e, err)
		}
	}
	opts, freeO := cStrings(req.Options)
	defer freeO()
	cerr := CompileProgram(prog, int32(len(req.Options)), opts)
	log, lerr := programLog(prog)
	if cerr != nil {
		var r Result
		if errors.As(cerr, &r) {
			return Output{}, &CompileError{Err: r, Log: log}
		}
		return Output{}, cerr
	}
	if lerr != nil {
		return Output{}, lerr
	}
	out := Output{Log: log}
	if out.Image, err = image(prog, req.CUBIN); err != nil {
		return Output{}, err
	}
	for _, e := range req.NameExpressions {
		l, err := GetLoweredName(prog, e)
		if err != nil {
			return Output{}, fmt.Errorf("nvrtcGetLoweredName(%q): %w", e, err)
		}
		out.Lowered = append(out.Lowered, l)
	}
	return out, nil
}

// destroy releases a program; its handle travels through C memory.
func destroy(prog Program) {
	p, free := cBuffer(uint64(unsafe.Sizeof(uintptr(0))))
	defer free()
	*(*uintptr)(p) = uintptr(prog)
	_ = DestroyProgram(p)
}

// programLog reads the compiler's log.
func programLog(prog Program) (string, error) {
	n, err := GetProgramLogSize(prog)
	if err != nil {
		return "", err
	}
	buf, free := cBuffer(n)
	defer free()
	if err := GetProgramLog(prog, buf); err != nil {
		return "", err
	}
	return strings.TrimRight(string(unsafe.Slice((*byte)(buf), n)), "\x00"), nil
}

// image reads the PTX or the cubin.
func image(prog Program, cubin bool) ([]byte, error) {
	size, get := GetPTXSize, GetPTX
	if cubin {
		size, get = GetCUBINSize, GetCUBIN
	}
	n, err := size(prog)
	if err != nil {
		return nil, err
	}
	buf, free := cBuffer(n)
	defer free()
	if err := get(prog, buf); err != nil {
		return nil, err
	}
	return append([]byte(nil), unsafe.Slice((*byte)(buf), n)...), nil
}

// SupportedArchs lists the compute capabilities (major*10+minor) this NVRTC
// can compile for, ascending. An NVRTC without nvrtcGetSupportedArchs (before
// 11.2) gives a MissingSymbolError.
func SupportedArchs() ([]int, error) {
	n, err := GetNumSupportedArchs()
	if err != nil {
		return nil, err
	}
	if n <= 0 || n > 4096 {
		return nil, fmt.Errorf("nvrtcapi: nvrtcGetNumSupportedArchs reported %d architectures", n)
	}
	buf, free := cInts(int(n))
	defer free()
	if err := GetSupportedArchs(buf); err != nil {
		return nil, err
	}
	return goInts(buf, int(n)), nil
}
