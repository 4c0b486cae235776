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

// loader opens the driver library once and resolves symbols for procs.
type loader struct {
	mu    sync.Mutex
	open  func() (library, error) // guarded by mu
	lib   library                 // guarded by mu; nil until opened
	err   error                   // guarded by mu; the sticky open failure
	tried bool                    // guarded by mu
	procs []*proc                 // guarded by mu; every proc, to forget addresses on swap

	loaded atomic.Bool // lib != nil; read without the lock by Result.Error
}

// driver is the process-wide loader every wrapper goes through.
var driver = &loader{open: openDefault}

// proc is one lazily resolved driver symbol.
type proc struct {
	name string
	addr atomic.Uintptr // 0 until resolved
}

// newProc registers a symbol with the loader.
func newProc(name string) *proc {
	p := &proc{name: name}
	driver.mu.Lock()
	driver.procs = append(driver.procs, p)
	driver.mu.Unlock()
	return p
}

// find returns the symbol's address, resolving it on first use. The fast path
// is one atomic load, so it is cheap enough for every call.
func (p *proc) find() (uintptr, error) {
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	return driver.resolve(p)
}

// library opens the driver library on first use; mu must be held.
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

// resolve looks a symbol up and caches its address.
func (l *loader) resolve(p *proc) (uintptr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	lib, err := l.library()
	if err != nil {
		return 0, err
	}
	a, err := lib.lookup(p.name)
	if err != nil || a == 0 {
		return 0, &MissingSymbolError{Symbol: p.name, Err: err}
	}
	p.addr.Store(a)
	return a, nil
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
	l.open, l.lib, l.err, l.tried = open, nil, nil, false
	l.loaded.Store(false)
	for _, p := range l.procs {
		p.addr.Store(0)
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
