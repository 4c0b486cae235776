package ncclapi

import (
	"sync"
	"sync/atomic"
)

// libraryEnv names the environment variable that overrides libnccl's path.
const libraryEnv = "VYRECUDA_LIBNCCL"

// defaultLibrary is libnccl's soname.
const defaultLibrary = "libnccl.so.2"

// opened is an opened libnccl. Tests substitute fakes for it.
type opened interface {
	// lookup returns the address of a symbol, or an error when it is absent.
	lookup(name string) (uintptr, error)
}

// loader opens libnccl once and resolves symbols for procs.
type loader struct {
	mu    sync.Mutex
	open  func() (opened, error) // guarded by mu
	lib   opened                 // guarded by mu; nil until opened
	err   error                  // guarded by mu; the sticky open failure
	tried bool                   // guarded by mu
	procs []*proc                // guarded by mu; every proc, to forget addresses on swap
}

// library is the process-wide loader every generated wrapper goes through.
var library = &loader{open: openDefault}

// proc is one lazily resolved symbol.
type proc struct {
	name       string
	since      int  // NCCL_VERSION_CODE that introduced it
	undeclared bool // the header the bindings came from lacked it
	addr       atomic.Uintptr
}

// newProc registers a symbol with the loader.
func (l *loader) newProc(since int, names ...string) *proc {
	p := &proc{name: names[0], since: since}
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

// find returns the symbol's address, resolving it on first use.
func (p *proc) find() (uintptr, error) {
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	return library.resolve(p)
}

// opened opens the library on first use; mu must be held.
func (l *loader) opened() (opened, error) {
	if !l.tried {
		l.tried = true
		l.lib, l.err = l.open()
		if l.lib == nil && l.err == nil {
			l.err = ErrLibraryNotFound
		}
	}
	return l.lib, l.err
}

func (l *loader) resolve(p *proc) (uintptr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	lib, err := l.opened()
	if err != nil {
		return 0, err
	}
	if p.undeclared {
		return 0, &MissingSymbolError{Symbol: p.name}
	}
	a, err := lib.lookup(p.name)
	if err != nil || a == 0 {
		return 0, &MissingSymbolError{Symbol: p.name, Err: err}
	}
	p.addr.Store(a)
	return a, nil
}

// swap replaces how the library is opened, forgetting what was opened and
// resolved, and returns a function that restores the previous opener.
func (l *loader) swap(open func() (opened, error)) (restore func()) {
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

func (l *loader) resetLocked(open func() (opened, error)) {
	l.open, l.lib, l.err, l.tried = open, nil, nil, false
	for _, p := range l.procs {
		p.addr.Store(0)
	}
}

// Loaded opens libnccl if that has not been tried yet and reports the
// outcome: nil when it is loaded, an error matching ErrLibraryNotFound
// otherwise.
func Loaded() error {
	library.mu.Lock()
	defer library.mu.Unlock()
	_, err := library.opened()
	return err
}
