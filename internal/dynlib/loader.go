package dynlib

import (
	"sync"
	"sync/atomic"
)

// Library is an opened shared library. Tests substitute fakes for it.
type Library interface {
	// Lookup returns the address of a symbol, or an error when it is absent.
	Lookup(name string) (uintptr, error)
}

// Miss describes a symbol the library could not supply, for a Loader's
// Missing hook to turn into its package's error.
type Miss struct {
	Names      []string // the symbol, then its fallbacks
	Since      int      // the version that introduced the oldest of Names
	Undeclared bool     // the header lacked it: it was never looked up
	Err        error    // why the first name's lookup failed; nil when Undeclared
}

// Loader opens a library once and resolves symbols for its procs.
type Loader struct {
	notFound error                     // returned when open gives neither a library nor an error
	missing  func(Library, Miss) error // builds a missing symbol's error; called with mu held

	mu    sync.Mutex
	open  func() (Library, error) // guarded by mu
	lib   Library                 // guarded by mu; nil until opened
	err   error                   // guarded by mu; the sticky open failure
	tried bool                    // guarded by mu
	procs []*Proc                 // guarded by mu; every proc, to forget addresses on Swap

	loaded atomic.Bool // lib != nil; read without the lock
}

// New returns a Loader that opens its library with open on first use.
// notFound is the error when open returns neither a library nor an error;
// missing turns a symbol the library lacks into the error Proc.Find returns
// (it is called once per symbol, with the opened library).
func New(open func() (Library, error), notFound error, missing func(Library, Miss) error) *Loader {
	return &Loader{open: open, notFound: notFound, missing: missing}
}

// Proc is one lazily resolved symbol, with optional older fallbacks of the
// same C signature.
type Proc struct {
	l     *Loader
	names []string // the symbol, then its fallbacks
	since int
	// undeclared is set when the header the bindings came from lacked the
	// symbol: it is never looked up.
	undeclared bool

	addr atomic.Uintptr         // 0 until resolved
	used atomic.Int32           // index in names of the resolved symbol
	fail atomic.Pointer[failed] // the cached lookup failure
}

// failed boxes a cached lookup error for atomic.Pointer.
type failed struct{ err error }

// NewProc registers a symbol (and its fallbacks, tried in order) that
// appeared in version since.
func (l *Loader) NewProc(since int, names ...string) *Proc {
	p := &Proc{l: l, names: names, since: since}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p
}

// NewUndeclaredProc registers a symbol the header lacked: every Find fails
// with the Missing hook's error, without looking the symbol up.
func (l *Loader) NewUndeclaredProc(since int, names ...string) *Proc {
	p := l.NewProc(since, names...)
	p.undeclared = true
	return p
}

// Procs returns every registered proc, in registration order.
func (l *Loader) Procs() []*Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Proc(nil), l.procs...)
}

// Names returns the symbol and its fallbacks.
func (p *Proc) Names() []string { return p.names }

// Find returns the symbol's address, opening the library and resolving the
// symbol on first use. A failed lookup is cached like an address.
func (p *Proc) Find() (uintptr, error) {
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	if f := p.fail.Load(); f != nil {
		return 0, f.err
	}
	return p.l.resolve(p)
}

// Symbol returns the name that resolved, or "" before a successful Find.
func (p *Proc) Symbol() string {
	if p.addr.Load() == 0 {
		return ""
	}
	return p.names[p.used.Load()]
}

// Open opens the library if that has not been tried yet and returns the
// outcome, which is remembered.
func (l *Loader) Open() (Library, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.library()
}

// Loaded reports whether the library is open. It never opens it.
func (l *Loader) Loaded() bool { return l.loaded.Load() }

// library opens the library on first use; mu must be held.
func (l *Loader) library() (Library, error) {
	if !l.tried {
		l.tried = true
		l.lib, l.err = l.open()
		if l.lib == nil && l.err == nil {
			l.err = l.notFound
		}
		l.loaded.Store(l.err == nil)
	}
	return l.lib, l.err
}

// resolve looks a symbol up, trying its fallbacks, and caches the address or
// the failure.
func (l *Loader) resolve(p *Proc) (uintptr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	if f := p.fail.Load(); f != nil {
		return 0, f.err
	}
	lib, err := l.library()
	if err != nil {
		return 0, err
	}
	miss := Miss{Names: p.names, Since: p.since, Undeclared: p.undeclared}
	if !p.undeclared {
		for i, name := range p.names {
			a, err := lib.Lookup(name)
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
	err = l.missing(lib, miss)
	p.fail.Store(&failed{err})
	return 0, err
}

// Swap replaces how the library is opened, forgetting the opened library and
// every resolved address and failure, and returns a function that restores
// the previous opener. Tests use it to fake a library.
func (l *Loader) Swap(open func() (Library, error)) (restore func()) {
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

func (l *Loader) resetLocked(open func() (Library, error)) {
	l.open, l.lib, l.err, l.tried = open, nil, nil, false
	l.loaded.Store(false)
	for _, p := range l.procs {
		p.addr.Store(0)
		p.used.Store(0)
		p.fail.Store(nil)
	}
}
