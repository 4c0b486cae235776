package core

import (
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"sync"
)

// Launch geometry defaults and limits for Programs.
const (
	// DefaultBlockSize is the threads per block of a Program whose spec
	// leaves Block zero.
	DefaultBlockSize = 256
	// MaxBlockSize is the most threads per block CUDA accepts.
	MaxBlockSize = 1024
	// DefaultMaxBlocks caps a grid derived from a buffer's length when the
	// spec leaves GridRule.MaxBlocks zero. The built-in kernels loop over
	// their data with a grid stride, so a capped grid still covers it all.
	DefaultMaxBlocks = 65535
	// MaxGridBlocks is the largest grid (x dimension) CUDA accepts.
	MaxGridBlocks = 1<<31 - 1
	// maxProgramArgs bounds the parameters of one kernel; CUDA's limit is
	// in bytes (4 KiB of parameters), far above anything a Program needs.
	maxProgramArgs = 256
)

// GridRule says how many blocks a Program launches. With ElemSize zero the
// grid is fixed at Blocks. With ElemSize set, the grid follows the data:
// elements = Len/ElemSize of bound buffer FromBuffer, blocks =
// ceil(elements/block size), at least 1 and at most MaxBlocks.
type GridRule struct {
	Blocks     uint32 // fixed grid in blocks; used when ElemSize is 0
	FromBuffer int    // index of the bound buffer whose length sets the element count
	ElemSize   int    // bytes per element; 0 selects the fixed grid
	MaxBlocks  uint32 // cap on the derived grid; 0 means DefaultMaxBlocks
}

// ProgramSpec describes a kernel for NewProgram.
//
// A launch passes the kernel its parameters in this order: one device
// pointer per bound buffer (Buffers of them), then the element count as a
// u32 when Count is set, then Scalars u32 values from DispatchConfig.Scalars.
// A spec that declares Params instead passes exactly those, typed, from
// DispatchConfig.Args.
type ProgramSpec struct {
	// Name names the program in errors; empty means Entry.
	Name string
	// Image is the code image (PTX or cubin) holding Entry. Programs whose
	// images have the same bytes share one loaded module per Backend; on a
	// driver that runs Go twins (core/sim), a second Program with the same
	// image and Entry loads a module of its own, so each runs its own Host.
	Image []byte
	// Entry is the kernel's entry point name inside Image.
	Entry string
	// Block is the threads per block (x); 0 means DefaultBlockSize.
	Block uint32
	// Grid says how the launch grid is derived.
	Grid GridRule
	// Buffers is how many resident buffers every dispatch binds.
	Buffers int
	// Count passes the element count derived by Grid as a u32 parameter
	// after the buffer pointers. It needs a derived grid (Grid.ElemSize >
	// 0), and since such a kernel touches that many elements of every bound
	// buffer, each dispatch is refused unless every bound buffer holds at
	// least count*ElemSize bytes.
	Count bool
	// Scalars is how many u32 parameters every dispatch passes in
	// DispatchConfig.Scalars (a float goes as math.Float32bits).
	Scalars int
	// Params declares the kernel's parameters by type, in order: buffers
	// (device pointers, with an optional byte offset per dispatch) and C
	// scalars of every size. Each dispatch then passes one Arg per parameter
	// in DispatchConfig.Args, checked for count and type before anything is
	// queued. With Params set, Buffers, Scalars and Count stay zero (NewProgram
	// sets Buffers to the number of buffer parameters), and Grid.FromBuffer
	// counts buffer parameters only; a derived grid uses the buffer's length
	// after its offset.
	Params []ParamType
	// WaitsOnGridDependencies says that the kernel executes
	// griddepcontrol.wait (cudaGridDependencySynchronize) before its first
	// access to global memory on every path, so it may be launched with
	// programmatic dependent launch: on a Backend that uses it
	// (Backend.ProgrammaticLaunch), a step of this program that directly
	// follows another step's launch in a Run or Capture may then start
	// while that kernel still runs, and waits for its results on the
	// device. Leave it false unless the image really waits: a kernel that
	// does not could read its inputs before they are written. It needs an
	// image for compute capability 9.0 or newer (PTX .target sm_90, ISA
	// 7.8); on older devices it changes nothing. NewProgram refuses it for
	// a PTX image without griddepcontrol.wait (a cubin cannot be checked).
	WaitsOnGridDependencies bool
	// Host is the Go twin of the kernel: it computes on simulated device
	// memory what the kernel computes on a GPU. It is bound on drivers that
	// implement HostKernelBinder (core/sim), which cannot run device code;
	// a Program without one cannot run there (ErrUnsupported).
	Host HostKernel
}

// Program is a validated, immutable kernel description built by NewProgram.
// It is safe for concurrent use and may be dispatched on any number of
// Backends; each Backend loads its image once, keyed by the image's content
// (on core/sim, once per twin of an entry point: each Program runs its own),
// and unloads it on Close.
type Program struct {
	spec  ProgramSpec // Image is a private copy
	key   [32]byte    // SHA-256 of Image: the module cache key
	args  int         // parameters per launch
	built *Compiled   // how Backend.Compile built it; nil for NewProgram
	// sm90 is the variant loaded in place of this Program on Backends that
	// use programmatic dependent launch (pdl.go): the built-in programs'
	// images that wait on their grid dependencies. nil for others.
	sm90 *Program
	// argTypes is the typed form of an untyped Program's buffers and u32
	// scalars (builtin.go), which lets a dispatch pass them as Args; nil
	// when it has none.
	argTypes []ParamType
}

// NewProgram validates spec and returns a Program. Image is copied, so the
// caller may reuse its slice.
func NewProgram(spec ProgramSpec) (*Program, error) {
	const op = "NewProgram"
	bad := func(detail, fix string) (*Program, error) {
		return nil, newError(op, KindInvalidArgument, detail, fix)
	}
	if spec.Name == "" {
		spec.Name = spec.Entry
	}
	if spec.Block == 0 {
		spec.Block = DefaultBlockSize
	}
	if len(spec.Params) > 0 {
		if err := checkParams(op, &spec); err != nil {
			return nil, err
		}
	}
	if err := checkGridWait(op, &spec); err != nil {
		return nil, err
	}
	g := spec.Grid
	switch {
	case len(spec.Image) == 0:
		return bad(fmt.Sprintf("program %q has an empty image", spec.Name), "pass the PTX or cubin bytes in Image")
	case spec.Entry == "":
		return bad(fmt.Sprintf("program %q has no entry point", spec.Name), "set Entry to the kernel's name in the image")
	case spec.Block > MaxBlockSize:
		return bad(fmt.Sprintf("program %q asks for %d threads per block; the limit is %d", spec.Name, spec.Block, MaxBlockSize),
			"use at most 1024 threads per block")
	case spec.Buffers < 0 || spec.Scalars < 0:
		return bad(fmt.Sprintf("program %q has %d buffers and %d scalars", spec.Name, spec.Buffers, spec.Scalars),
			"use non-negative counts")
	case spec.Buffers > maxProgramArgs || spec.Scalars > maxProgramArgs-spec.Buffers-1:
		return bad(fmt.Sprintf("program %q has %d buffers and %d scalars; at most %d parameters in all", spec.Name, spec.Buffers, spec.Scalars, maxProgramArgs),
			"pass fewer parameters, or pack them into a buffer")
	case g.ElemSize < 0:
		return bad(fmt.Sprintf("program %q has element size %d", spec.Name, g.ElemSize), "use a positive element size, or 0 for a fixed grid")
	case g.ElemSize == 0 && (g.Blocks == 0 || g.Blocks > MaxGridBlocks):
		return bad(fmt.Sprintf("program %q has a fixed grid of %d blocks", spec.Name, g.Blocks),
			"set Grid.Blocks to 1..2147483647, or Grid.ElemSize to derive the grid from a buffer")
	case g.ElemSize > 0 && (g.FromBuffer < 0 || g.FromBuffer >= spec.Buffers):
		return bad(fmt.Sprintf("program %q derives its grid from buffer %d but binds %d buffers", spec.Name, g.FromBuffer, spec.Buffers),
			"set Grid.FromBuffer to the index of a bound buffer")
	case g.MaxBlocks > MaxGridBlocks:
		return bad(fmt.Sprintf("program %q caps its grid at %d blocks; the limit is %d", spec.Name, g.MaxBlocks, MaxGridBlocks),
			"use a smaller cap, or 0 for the default")
	case spec.Count && g.ElemSize == 0:
		return bad(fmt.Sprintf("program %q passes an element count but has a fixed grid", spec.Name),
			"set Grid.ElemSize and Grid.FromBuffer so the count can be derived")
	}
	if g.ElemSize > 0 && g.MaxBlocks == 0 {
		spec.Grid.MaxBlocks = DefaultMaxBlocks
	}
	spec.Image = slices.Clone(spec.Image)
	p := &Program{spec: spec, key: sha256.Sum256(spec.Image)}
	p.args = spec.Buffers + spec.Scalars
	if spec.Count {
		p.args++
	}
	if len(spec.Params) > 0 {
		spec.Params = slices.Clone(spec.Params)
		p.spec.Params, p.args = spec.Params, len(spec.Params)
	}
	return p, nil
}

// Name returns the program's name ("" for a nil Program).
func (p *Program) Name() string {
	if p == nil {
		return ""
	}
	return p.spec.Name
}

// Buffers returns how many resident buffers every dispatch binds (0 for a
// nil Program).
func (p *Program) Buffers() int {
	if p == nil {
		return 0
	}
	return p.spec.Buffers
}

// Scalars returns how many u32 scalars every dispatch passes (0 for a nil
// Program).
func (p *Program) Scalars() int {
	if p == nil {
		return 0
	}
	return p.spec.Scalars
}

// Params returns the types of the Args a dispatch of p may pass in
// DispatchConfig.Args, in order: the declared ProgramSpec.Params, or for a
// built-in program the typed form of its buffers and scalars (its element
// count stays derived from the buffers, which it takes whole). It returns
// nil for a program that takes only Bufs and u32 Scalars, and for a nil
// Program.
func (p *Program) Params() []ParamType {
	switch {
	case p == nil:
		return nil
	case p.typed():
		return slices.Clone(p.spec.Params)
	}
	return slices.Clone(p.argTypes)
}

// Spec returns a copy of the validated spec, defaults filled in; the zero
// spec for a nil Program.
func (p *Program) Spec() ProgramSpec {
	if p == nil {
		return ProgramSpec{}
	}
	s := p.spec
	s.Image = slices.Clone(s.Image)
	s.Params = slices.Clone(s.Params)
	return s
}

// count returns the element count the grid rule derives from bound buffer
// lengths; ok is false for a fixed grid.
func (p *Program) count(bufs []Buffer) (n int, ok bool) {
	g := p.spec.Grid
	if g.ElemSize == 0 {
		return 0, false
	}
	return bufs[g.FromBuffer].Len / g.ElemSize, true
}

// blocks returns the grid for a dispatch, given its element count.
func (p *Program) blocks(elements int) uint32 {
	g := p.spec.Grid
	if g.ElemSize == 0 {
		return g.Blocks
	}
	bs := uint64(p.spec.Block)
	n := (uint64(elements) + bs - 1) / bs
	n = max(n, 1)
	return uint32(min(n, uint64(g.MaxBlocks)))
}

// checkDispatch validates one dispatch of p over bufs with cfg and returns
// its launch geometry and element count (0 when the grid is fixed). step
// names the step in messages (negative: a single dispatch).
func (p *Program) checkDispatch(op string, step int, bufs []Buffer, cfg *DispatchConfig) (LaunchConfig, uint32, error) {
	if p.typed() || len(cfg.Args) > 0 {
		lc, err := p.checkTyped(op, step, cfg)
		return lc, 0, err
	}
	prefix := func() string {
		if step < 0 {
			return ""
		}
		return fmt.Sprintf("step %d: ", step)
	}
	if len(bufs) != p.spec.Buffers {
		return LaunchConfig{}, 0, newError(op, KindInvalidArgument,
			fmt.Sprintf("%sprogram %q binds %d buffers but got %d", prefix(), p.spec.Name, p.spec.Buffers, len(bufs)),
			"pass exactly the buffers the program binds, in its order")
	}
	if len(cfg.Scalars) != p.spec.Scalars {
		return LaunchConfig{}, 0, newError(op, KindInvalidArgument,
			fmt.Sprintf("%sprogram %q takes %d scalars but got %d", prefix(), p.spec.Name, p.spec.Scalars, len(cfg.Scalars)),
			"pass exactly the scalars the program takes in DispatchConfig.Scalars")
	}
	if cfg.Grid > MaxGridBlocks {
		return LaunchConfig{}, 0, newError(op, KindInvalidArgument,
			fmt.Sprintf("%sgrid override of %d blocks; the limit is %d", prefix(), cfg.Grid, MaxGridBlocks),
			"pass a smaller grid, or 0 for the program's rule")
	}
	elements, derived := p.count(bufs)
	var count uint32
	if derived && p.spec.Count {
		if uint64(elements) > math.MaxUint32 {
			return LaunchConfig{}, 0, newError(op, KindInvalidArgument,
				fmt.Sprintf("%sprogram %q would process %d elements; a u32 count holds at most %d", prefix(), p.spec.Name, elements, uint32(math.MaxUint32)),
				"split the work over smaller buffers")
		}
		count = uint32(elements)
		need := elements * p.spec.Grid.ElemSize // <= FromBuffer's Len, so it cannot overflow
		for i, h := range bufs {
			if h.Len < need {
				return LaunchConfig{}, 0, newError(op, KindInvalidArgument,
					fmt.Sprintf("%sprogram %q processes %d elements (%d bytes) but buffer %d (handle %d) has %d bytes",
						prefix(), p.spec.Name, elements, need, i, h.ID, h.Len),
					"bind buffers that each hold at least as many elements as the buffer the count comes from")
			}
		}
	}
	grid := cfg.Grid
	if grid == 0 {
		grid = p.blocks(elements)
	}
	return LaunchConfig{Grid: [3]uint32{grid, 1, 1}, Block: [3]uint32{p.spec.Block, 1, 1}}, count, nil
}

// moduleKey identifies a loaded module: by image content, and for a
// Program whose entry point another Program's twin already holds on a
// HostKernelBinder, also by that Program. A function is bound to one Go
// twin, so two Programs with the same image and entry but their own twins
// need two modules there.
type moduleKey struct {
	image [32]byte
	owner *Program // nil: the module shared by every Program of the image
}

// programFunc identifies an entry point inside a module.
type programFunc struct {
	mod   moduleKey
	entry string
}

// programCache holds one Backend's loaded modules and resolved functions.
// Programs sharing an image share its module, and on a real driver those
// sharing image and entry share the function. On a HostKernelBinder the
// first Program resolving an entry of the shared module binds its twin
// there; a later Program with the same image and entry loads a module of its
// own, so each Program runs its own Go twin.
type programCache struct {
	mu      sync.Mutex // guards every field below
	modules map[moduleKey]Module
	funcs   map[programFunc]Function
	twinOf  map[programFunc]*Program // HostKernelBinder: whose twin a shared function runs
	byProg  map[*Program]Function    // fast path for programs seen before
	closed  bool
}

// DispatchConfig is the per-dispatch part of a launch.
type DispatchConfig struct {
	// Grid overrides the program's grid rule with this many blocks; 0
	// keeps the rule.
	Grid uint32
	// Scalars are the u32 parameters the program takes, in order.
	Scalars []uint32
	// Args are the typed arguments of a Program declared with
	// ProgramSpec.Params, one per parameter, in order; such a dispatch
	// passes no Bufs and no Scalars.
	Args []Arg
	// Timing asks for the device time of the launches, read with
	// Pending.DeviceTime (timing events around them).
	Timing bool
}

// function returns p's Function on b, loading its module and resolving and
// binding its entry point on first use. A failure leaves nothing loaded
// that the cache did not already hold.
func (b *Backend) function(op string, p *Program) (Function, error) {
	p = p.image(b.pdl)
	c := &b.progs
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.byProg[p]; ok {
		return f, nil
	}
	if c.closed {
		return 0, closedError(op)
	}
	if c.byProg == nil {
		c.modules = make(map[moduleKey]Module)
		c.funcs = make(map[programFunc]Function)
		c.byProg = make(map[*Program]Function)
		c.twinOf = make(map[programFunc]*Program)
	}
	binder, bind := b.drv.(HostKernelBinder)
	mk := moduleKey{image: p.key}
	fk := programFunc{mod: mk, entry: p.spec.Entry}
	if q, taken := c.twinOf[fk]; bind && taken && q != p {
		mk.owner = p
		fk.mod = mk
	}
	if f, ok := c.funcs[fk]; ok {
		c.byProg[p] = f
		return f, nil
	}
	if bind && p.spec.Host == nil {
		return 0, newError(op, KindUnsupported,
			fmt.Sprintf("program %q has no Go twin and this driver cannot run device code", p.spec.Name),
			"set ProgramSpec.Host to a Go function computing what the kernel does, or run on a GPU")
	}
	mod, loaded := c.modules[mk]
	fresh := false
	if !loaded {
		m, err := b.drv.ModuleLoad(p.spec.Image)
		if err != nil {
			e := driverError(op, "ModuleLoad", err)
			e.Detail = fmt.Sprintf("loading program %q: %s", p.spec.Name, e.Detail)
			return 0, e
		}
		if m == 0 {
			return 0, nullSuccess(op, "ModuleLoad")
		}
		mod, fresh = m, true
	}
	// A freshly loaded module that yields no function is unloaded again, so
	// a bad entry name leaves nothing behind.
	undo := func() {
		if fresh {
			if err := b.drv.ModuleUnload(mod); err != nil {
				b.log.Error("unloading a module after a failed lookup failed", "op", op, "program", p.spec.Name, "err", err)
			}
		}
	}
	f, err := b.drv.ModuleFunction(mod, p.spec.Entry)
	if err != nil {
		undo()
		e := driverError(op, "ModuleFunction", err)
		e.Detail = fmt.Sprintf("program %q entry %q: %s", p.spec.Name, p.spec.Entry, e.Detail)
		return 0, e
	}
	if f == 0 {
		undo()
		return 0, nullSuccess(op, "ModuleFunction")
	}
	if bind {
		if err := binder.BindHostKernel(f, p.spec.Host); err != nil {
			undo()
			return 0, driverError(op, "BindHostKernel", err)
		}
	}
	c.modules[mk] = mod
	c.funcs[fk] = f
	if bind && mk.owner == nil {
		c.twinOf[fk] = p
	}
	c.byProg[p] = f
	return f, nil
}

// closePrograms unloads every module the Backend loaded for Programs. Close
// calls it once no launch can be in flight; unloading continues past
// failures and the first one is returned.
func (b *Backend) closePrograms() error {
	c := &b.progs
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var first error
	for k, m := range c.modules {
		if err := b.drv.ModuleUnload(m); err != nil {
			b.log.Error("unloading a program module failed", "op", "Close", "err", err)
			if first == nil {
				first = driverError("Close", "ModuleUnload", err)
			}
		}
		delete(c.modules, k)
	}
	clear(c.funcs)
	clear(c.byProg)
	clear(c.twinOf)
	return first
}
