package core

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vyre-go/vyrecuda/nvrtc"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

// CompileOptions are the compiler options of a CompileSpec: preprocessor
// defines, include files given as strings, fast math, the language dialect,
// line information and further NVRTC options.
type CompileOptions = nvrtc.Options

// CompileSpec describes a kernel written in CUDA C++ for Backend.Compile.
// Launch geometry, Params and Host mean what they mean in ProgramSpec.
type CompileSpec struct {
	// Name names the program in errors and the source file in the
	// compiler's messages (Name + ".cu"); empty means Entry.
	Name string
	// Source is the CUDA C++ text.
	Source string
	// Entry names the kernel: an identifier ("saxpy") or a name expression
	// for a template instance ("scale<double>"). The kernel needs no
	// extern "C": the entry is compiled as a name expression and its
	// lowered (mangled) symbol is looked up.
	Entry   string
	Options CompileOptions
	Params  []ParamType
	Block   uint32
	Grid    GridRule
	// Host is the Go twin; required on a driver that cannot run device code
	// (core/sim), where nothing is compiled and the twin runs instead.
	Host HostKernel
}

// Compiled reports how Backend.Compile built a Program.
type Compiled struct {
	// Target is "sm_90" for a cubin, "compute_90" for PTX, or "sim" on a
	// driver that runs Go twins.
	Target string
	CUBIN  bool   // the image is a cubin for the device's own architecture
	Symbol string // the kernel's symbol in the image
	Cached bool   // read from the disk cache: NVRTC was not called
	// NVRTCVersion is the compiler's version ("13.0"); empty on sim.
	NVRTCVersion string
	// Log holds the compiler's warnings; empty when cached or on sim.
	Log string
}

// WithCompiler makes Backend.Compile use c instead of nvrtc.Default() (the
// system's libnvrtc with the cache under os.UserCacheDir()). A nil c keeps
// the default.
func WithCompiler(c *nvrtc.Compiler) Option {
	return func(cfg *config) { cfg.compiler = c }
}

// Compiled returns how Backend.Compile built p; ok is false for a Program
// made by NewProgram.
func (p *Program) Compiled() (c Compiled, ok bool) {
	if p == nil || p.built == nil {
		return Compiled{}, false
	}
	return *p.built, true
}

// Compile compiles CUDA C++ source for the Backend's device with NVRTC and
// returns it as a Program: a cubin for the device's compute capability when
// NVRTC supports it, else PTX for the newest architecture below it (which
// the driver JIT-compiles on load). Results are kept in a disk cache (package
// nvrtc) keyed by source, include files, options, entry, target and NVRTC
// version, so the same kernel compiled again, by this process or another,
// does not call NVRTC. The module is loaded and the entry resolved before
// Compile returns, so a bad entry fails here rather than at the first
// dispatch.
//
// A source the compiler rejects fails with ErrInvalidArgument whose text
// carries the compiler's log (file, line and message); a missing libnvrtc,
// or a device older than every architecture NVRTC supports, fails with
// ErrUnsupported. On a driver that cannot run device code (core/sim)
// nothing is compiled: spec.Host is required, and the Program runs it. The
// simulated device still refuses, with the same error and a log in NVRTC's
// form, an entry the source does not define as a __global__ function,
// parameters whose count or pointer/scalar kinds differ from spec.Params,
// and unbalanced brackets (sim.Device.Compile says what it checks).
func (b *Backend) Compile(spec CompileSpec) (*Program, error) {
	return b.compile("Compile", context.Background(), spec)
}

// CompileContext is Compile that stops waiting when ctx is done, returning
// ErrInFlight wrapping ctx.Err() (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded holds). A context already done compiles
// nothing. A compilation cannot be interrupted: a cancelled one runs on in
// a background goroutine until the compiler returns, and its result is
// dropped (on a GPU it still reaches the disk cache, so compiling the same
// kernel again is quick); nothing is loaded on the device for it, and
// Backend.Close waits for it. A compilation that finished is returned even when ctx is
// done by then.
func (b *Backend) CompileContext(ctx context.Context, spec CompileSpec) (*Program, error) {
	const op = "CompileContext"
	if ctx == nil {
		return nil, newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
	}
	return b.compile(op, ctx, spec)
}

// built is what a compilation produced.
type built struct {
	image []byte
	info  Compiled
}

// compile is Compile and CompileContext: check spec, run the compiler
// (waiting for it as long as ctx allows), then load the Program.
func (b *Backend) compile(op string, ctx context.Context, spec CompileSpec) (*Program, error) {
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	if spec.Name == "" {
		spec.Name = spec.Entry
	}
	run, err := b.compiler(op, spec)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: op, Kind: KindInFlight, Detail: fmt.Sprintf("the context is done; program %q was not compiled", spec.Name),
			Fix: "pass a context that is not done", Err: err}
	}
	res, err := b.await(op, ctx, spec.Name, run)
	if err != nil {
		return nil, err
	}
	p, err := NewProgram(ProgramSpec{Name: spec.Name, Block: spec.Block, Grid: spec.Grid, Params: spec.Params, Host: spec.Host,
		Image: res.image, Entry: res.info.Symbol})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Op = op
		}
		return nil, err
	}
	p.built = &res.info
	if _, err := b.function(op, p); err != nil {
		return nil, err
	}
	return p, nil
}

// stubCompiler is the simulated device's stand-in for NVRTC
// (sim.Device.Compile): it checks the source as far as its declarations
// show and returns an image naming the entry.
type stubCompiler interface {
	Compile(req nvrtcapi.Request, params []ParamType) (nvrtcapi.Output, error)
}

// compiler checks spec and returns the compilation to run: NVRTC through
// the Backend's Compiler, or, on a driver that runs Go twins, its stand-in.
func (b *Backend) compiler(op string, spec CompileSpec) (func() (built, error), error) {
	switch {
	case strings.TrimSpace(spec.Source) == "":
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("program %q has no source", spec.Name), "pass the CUDA C++ text in Source")
	case strings.TrimSpace(spec.Entry) == "":
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("program %q has no entry", spec.Name),
			"set Entry to the kernel's name, or a template instance such as scale<float>")
	}
	src := nvrtc.Source{Name: spec.Name + ".cu", Code: spec.Source, Entry: spec.Entry, Options: spec.Options}
	if _, ok := b.drv.(HostKernelBinder); !ok {
		c := b.cfg.compiler
		if c == nil {
			c = nvrtc.Default()
		}
		return func() (built, error) {
			res, err := c.Compile(src, b.info.CCMajor, b.info.CCMinor)
			if err != nil {
				return built{}, compileError(op, spec.Name, b.info, err)
			}
			return built{image: res.Image, info: Compiled{Target: res.Target, CUBIN: res.CUBIN, Symbol: res.Symbol,
				Cached: res.Cached, NVRTCVersion: res.Version, Log: res.Log}}, nil
		}, nil
	}
	if spec.Host == nil {
		return nil, newError(op, KindUnsupported,
			fmt.Sprintf("program %q has no Go twin and this driver cannot run device code", spec.Name),
			"set CompileSpec.Host to a Go function computing what the kernel does, or run on a GPU")
	}
	stub, ok := b.drv.(stubCompiler)
	if !ok {
		return nil, newError(op, KindUnsupported, fmt.Sprintf("program %q cannot be compiled: this driver runs Go twins but offers no compiler", spec.Name),
			"give the driver a Compile method as sim.Device has, or build the Program with NewProgram")
	}
	req, err := src.Request("", false)
	if err != nil {
		return nil, compileError(op, spec.Name, b.info, err)
	}
	return func() (built, error) {
		out, err := stub.Compile(req, spec.Params)
		if err == nil && len(out.Lowered) != 1 {
			err = fmt.Errorf("the driver's compiler returned %d symbols for one entry", len(out.Lowered))
		}
		if err != nil {
			return built{}, compileError(op, spec.Name, b.info, err)
		}
		return built{image: out.Image, info: Compiled{Target: "sim", Symbol: out.Lowered[0], Log: out.Log}}, nil
	}, nil
}

// await runs a compilation and waits for it until ctx is done. With a
// context that can be done, it runs in a goroutine that Backend.Close waits
// for; when ctx is done first its result is dropped: a compilation holds
// nothing that needs releasing (the module is loaded only after it).
func (b *Backend) await(op string, ctx context.Context, name string, run func() (built, error)) (built, error) {
	if ctx.Done() == nil {
		return run()
	}
	type outcome struct {
		res built
		err error
	}
	done := make(chan outcome, 1)
	b.abandoned.Add(1)
	go func() {
		defer b.abandoned.Done()
		res, err := run()
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
	}
	select {
	case o := <-done: // finished as the context ended: report it
		return o.res, o.err
	default:
	}
	return built{}, &Error{Op: op, Kind: KindInFlight, Detail: fmt.Sprintf("stopped waiting for program %q to compile", name),
		Fix: "give the compilation more time; it finishes in the background, and on a GPU its result reaches the disk cache for the next Compile",
		Err: ctx.Err()}
}

// compileError maps a compiler failure to the Backend's error kinds.
func compileError(op, name string, info DeviceInfo, err error) *Error {
	cause := strippedCause{err: err}
	var ce *nvrtcapi.CompileError
	if errors.As(err, &ce) {
		// The log is in Detail; the cause adds only the status.
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("program %q does not compile for compute capability %d.%d: %s", name, info.CCMajor, info.CCMinor, strings.TrimSpace(ce.Log)),
			Fix:    "correct the source where the compiler's log points", Err: strippedCause{err: err, text: ce.Err.Error()}}
	}
	var ud *nvrtc.UnsupportedDeviceError
	switch {
	case errors.Is(err, nvrtcapi.ErrLibraryNotFound):
		return &Error{Op: op, Kind: KindUnsupported, Detail: fmt.Sprintf("cannot compile program %q: NVRTC is not available", name),
			Fix: "install the CUDA toolkit's NVRTC (libnvrtc.so.13, .12 or .11.2) or set " + nvrtcapi.LibraryEnv + " to its path", Err: cause}
	case errors.As(err, &ud):
		return &Error{Op: op, Kind: KindUnsupported, Detail: fmt.Sprintf("cannot compile program %q for this device", name),
			Fix: "use an NVRTC from an older CUDA toolkit (" + nvrtcapi.LibraryEnv + ")", Err: cause}
	}
	return &Error{Op: op, Kind: KindInvalidArgument, Detail: fmt.Sprintf("compiling program %q failed", name),
		Fix: "check the entry expression and the options", Err: cause}
}

// strippedCause carries a cause's text without its own Fix sentence (the
// Backend's error supplies one), and unwraps to it for errors.Is and As.
type strippedCause struct {
	err  error
	text string // replaces err's text when set
}

// Error returns the cause's text without its Fix sentence.
func (c strippedCause) Error() string {
	if c.text != "" {
		return c.text
	}
	s := c.err.Error()
	if i := strings.Index(s, "; Fix:"); i >= 0 {
		s = s[:i]
	}
	return s
}

// Unwrap returns the cause.
func (c strippedCause) Unwrap() error { return c.err }
