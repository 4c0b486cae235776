package cudaapi

import (
	"sync"
	"sync/atomic"
)

// libraryEnv names the environment variable that overrides the driver
// library's path.
const libraryEnv = "VYRECUDA_LIBCUDA"

// defaultLibrary is the driver library's soname.
const defaultLibrary = "libcuda.so.1"

// library is an opened driver library. Tests substitute fakes for it.
type library interface {
	// lookup returns the address of a symbol, or an error when it is absent.
	lookup(name string) (uintptr, error)
}

// versioner is implemented by libraries that can report the driver's CUDA
// version (cuDriverGetVersion) without going through a proc.
type versioner interface {
	driverVersion() int
}

// loader opens a library once and resolves symbols for procs.
type loader struct {
	name   string // library name for errors, e.g. "libcuda"
	header int    // version of the header its bindings were generated from

	mu      sync.Mutex
	open    func() (library, error) // guarded by mu
	lib     library                 // guarded by mu; nil until opened
	err     error                   // guarded by mu; the sticky open failure
	tried   bool                    // guarded by mu
	version int                     // guarded by mu; the driver's version, -1 until asked
	procs   []*proc                 // guarded by mu; every proc, to forget addresses on swap

	loaded atomic.Bool // lib != nil; read without the lock by Result.Error
}

// driver is the process-wide loader every driver wrapper goes through. Another
// library (NVRTC, NCCL) gets a loader of its own, with its own open function,
// and its generated procs register with it.
var driver = &loader{name: "libcuda", header: HeaderVersion, open: openDefault, version: -1}

// proc is one lazily resolved symbol, with an optional older fallback of the
// same C signature.
type proc struct {
	l     *loader  // the loader it registered with; nil means driver
	names []string // the symbol, then its fallback
	since int      // CUDA version that introduced the oldest of names
	// undeclared is set when the header the bindings came from lacked the
	// symbol: it is never looked up.
	undeclared bool

	addr atomic.Uintptr                     // 0 until resolved
	used atomic.Int32                       // index in names of the resolved symbol
	fail atomic.Pointer[MissingSymbolError] // the cached lookup failure
}

// newProc registers a symbol (and its fallback) with the loader.
func (l *loader) newProc(since int, names ...string) *proc {
	p := &proc{l: l, names: names, since: since}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p
}

// newUndeclaredProc registers a symbol the header lacked: every call fails
// with *MissingSymbolError.
func (l *loader) newUndeclaredProc(since int, names ...string) *proc {
	p := l.newProc(since, names...)
	p.undeclared = true
	return p
}

// find returns the symbol's address, resolving it on first use. The fast path
// is one atomic load, so it is cheap enough for every call; a failed lookup is
// cached too.
func (p *proc) find() (uintptr, error) {
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	if e := p.fail.Load(); e != nil {
		return 0, e
	}
	if p.l == nil {
		return driver.resolve(p)
	}
	return p.l.resolve(p)
}

// symbol returns the name that resolved, or "" before a successful find.
func (p *proc) symbol() string {
	if p.addr.Load() == 0 {
		return ""
	}
	return p.names[p.used.Load()]
}

// library opens the library on first use; mu must be held.
func (l *loader) library() (library, error) {
	if !l.tried {
		l.tried = true
		l.lib, l.err = l.open()
		if l.lib == nil && l.err == nil {
			l.err = ErrDriverNotFound
		}
		l.loaded.Store(l.err == nil)
	}
	return l.lib, l.err
}

// driverVersionLocked asks the opened library for the driver's version once;
// 0 when it cannot say. mu must be held and the library open.
func (l *loader) driverVersionLocked() int {
	if l.version < 0 {
		l.version = 0
		if v, ok := l.lib.(versioner); ok {
			l.version = v.driverVersion()
		}
	}
	return l.version
}

// resolve looks a symbol up, trying its fallback, and caches the address or
// the failure.
func (l *loader) resolve(p *proc) (uintptr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	if e := p.fail.Load(); e != nil {
		return 0, e
	}
	lib, err := l.library()
	if err != nil {
		return 0, err
	}
	miss := &MissingSymbolError{Library: l.name, Symbol: p.names[0], Fallbacks: p.names[1:], Since: p.since}
	if p.undeclared {
		miss.Header = l.header
	} else {
		for i, name := range p.names {
			a, err := lib.lookup(name)
			if err == nil && a != 0 {
				p.used.Store(int32(i))
				p.addr.Store(a)
				return a, nil
			}
			if i == 0 {
				miss.Err = err
			}
		}
	}
	miss.Driver = l.driverVersionLocked()
	p.fail.Store(miss)
	return 0, miss
}

// swap replaces how the library is opened, forgetting the opened library and
// every resolved address, and returns a function that restores the previous
// opener. Tests use it to fake the driver.
func (l *loader) swap(open func() (library, error)) (restore func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.open
	l.resetLocked(open)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.resetLocked(prev)
	}
}

func (l *loader) resetLocked(open func() (library, error)) {
	l.open, l.lib, l.err, l.tried, l.version = open, nil, nil, false, -1
	l.loaded.Store(false)
	for _, p := range l.procs {
		p.addr.Store(0)
		p.used.Store(0)
		p.fail.Store(nil)
	}
}

// Loaded opens the driver library if that has not been tried yet and reports
// the outcome: nil when libcuda is loaded, an error matching ErrDriverNotFound
// otherwise. It does not call cuInit.
func Loaded() error {
	driver.mu.Lock()
	defer driver.mu.Unlock()
	_, err := driver.library()
	return err
}
