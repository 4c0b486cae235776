package nvrtcapi

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// LibraryEnv names the environment variable that selects libnvrtc's path.
const LibraryEnv = "VYRECUDA_LIBNVRTC"

// sonames are the NVRTC libraries tried, newest first.
var sonames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}

// library is an opened NVRTC library. Tests substitute fakes for it.
type library interface {
	lookup(name string) (uintptr, error)
}

// loader opens libnvrtc once and resolves symbols for procs.
type loader struct {
	mu    sync.Mutex
	open  func() (library, error) // guarded by mu
	lib   library                 // guarded by mu
	err   error                   // guarded by mu; the sticky open failure
	tried bool                    // guarded by mu
	procs []*proc                 // guarded by mu
}

// nvrtc is the process-wide loader every wrapper goes through.
var nvrtc = &loader{open: openDefault}

// proc is one lazily resolved NVRTC symbol.
type proc struct {
	name  string
	since int // CUDA toolkit whose NVRTC introduced it
	// undeclared is set when the nvrtc.h the bindings came from lacked the
	// symbol: it is never looked up.
	undeclared bool
	addr       atomic.Uintptr
}

// newProc registers a symbol with the loader. The generated code passes one
// name: NVRTC has no versioned symbols.
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
	l := nvrtc
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := p.addr.Load(); a != 0 {
		return a, nil
	}
	lib, err := l.library()
	if err != nil {
		return 0, err
	}
	if p.undeclared {
		return 0, &MissingSymbolError{Symbol: p.name, Since: p.since, Undeclared: true}
	}
	a, err := lib.lookup(p.name)
	if err != nil || a == 0 {
		return 0, &MissingSymbolError{Symbol: p.name, Since: p.since, Err: err}
	}
	p.addr.Store(a)
	return a, nil
}

// library opens libnvrtc on first use; mu must be held.
func (l *loader) library() (library, error) {
	if !l.tried {
		l.tried = true
		l.lib, l.err = l.open()
		if l.lib == nil && l.err == nil {
			l.err = &LibraryNotFoundError{EnvName: LibraryEnv}
		}
	}
	return l.lib, l.err
}

// swap replaces how the library is opened, forgetting what was opened and
// resolved, and returns the restoring function. Tests use it.
func (l *loader) swap(open func() (library, error)) (restore func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.open
	l.reset(open)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.reset(prev)
	}
}

func (l *loader) reset(open func() (library, error)) {
	l.open, l.lib, l.err, l.tried = open, nil, nil, false
	for _, p := range l.procs {
		p.addr.Store(0)
	}
}

// candidates lists the paths openDefault tries, in order.
func candidates(getenv func(string) string) []string {
	var out []string
	if p := getenv(LibraryEnv); p != "" {
		out = append(out, p)
	}
	out = append(out, sonames...)
	dirs := []string{"/usr/local/cuda/lib64"}
	if home := getenv("CUDA_HOME"); home != "" {
		dirs = append([]string{filepath.Join(home, "lib64")}, dirs...)
	}
	for _, d := range dirs {
		for _, s := range sonames {
			out = append(out, filepath.Join(d, s))
		}
	}
	return out
}

// openFirst opens the first candidate that loads; the error lists them all.
func openFirst(paths []string, open func(string) (library, error)) (library, error) {
	nf := &LibraryNotFoundError{EnvName: LibraryEnv}
	for _, p := range paths {
		lib, err := open(p)
		if err == nil {
			return lib, nil
		}
		nf.Tried = append(nf.Tried, err.Error())
	}
	return nil, nf
}

// openDefault opens the first NVRTC library that loads.
func openDefault() (library, error) {
	if !haveCgo {
		return nil, &LibraryNotFoundError{NoCgo: true, EnvName: LibraryEnv}
	}
	return openFirst(candidates(os.Getenv), dlopen)
}

// Loaded opens libnvrtc if that has not been tried yet and reports the
// outcome: nil when it is loaded, an error matching ErrLibraryNotFound
// otherwise.
func Loaded() error {
	nvrtc.mu.Lock()
	defer nvrtc.mu.Unlock()
	_, err := nvrtc.library()
	return err
}
