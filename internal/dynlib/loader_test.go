package dynlib

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errNotFound and errMissing stand in for an API package's errors.
var (
	errNotFound = errors.New("test: library not found")
	errMissing  = errors.New("test: symbol missing")
)

// missError is what the test loaders' Missing hook returns.
type missError struct {
	Miss
	lib Library
}

func (e *missError) Error() string        { return fmt.Sprintf("test: no %v: %v", e.Names, e.Err) }
func (e *missError) Is(target error) bool { return target == errMissing }
func (e *missError) Unwrap() error        { return e.Err }

// fakeLibrary is a symbol table standing in for a shared library.
type fakeLibrary struct {
	mu      sync.Mutex
	symbols map[string]uintptr
	lookups map[string]int
}

func (f *fakeLibrary) Lookup(name string) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookups == nil {
		f.lookups = map[string]int{}
	}
	f.lookups[name]++
	if a, ok := f.symbols[name]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("fake: undefined symbol %s", name)
}

// newTestLoader returns a Loader that opens lib (or fails with openErr),
// counting opens.
func newTestLoader(lib Library, openErr error) (*Loader, *int) {
	opens := new(int)
	l := New(func() (Library, error) {
		*opens++
		if openErr != nil {
			return nil, openErr
		}
		return lib, nil
	}, errNotFound, func(lib Library, m Miss) error { return &missError{m, lib} })
	return l, opens
}

func TestLoaderRemembersFailedOpen(t *testing.T) {
	l, opens := newTestLoader(nil, fmt.Errorf("%w: fake: nothing here", errNotFound))
	p := l.NewProc(0, "fnPresent")
	for i := 0; i < 3; i++ {
		_, err := p.Find()
		require.ErrorIs(t, err, errNotFound)
	}
	assert.Equal(t, 1, *opens, "a failed open is remembered, not retried per call")
	_, err := l.Open()
	assert.ErrorIs(t, err, errNotFound)
	assert.False(t, l.Loaded())
}

func TestLoaderNilLibraryIsNotFound(t *testing.T) {
	l, _ := newTestLoader(nil, nil)
	lib, err := l.Open()
	assert.Nil(t, lib)
	assert.ErrorIs(t, err, errNotFound)
	assert.False(t, l.Loaded())
}

func TestLoaderSymbols(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{"fnPresent": 0x1234, "fnZero": 0}}
	l, opens := newTestLoader(lib, nil)
	assert.False(t, l.Loaded(), "nothing opened before the first lookup")
	tests := []struct {
		name    string
		symbol  string
		want    uintptr
		missing bool
	}{
		{"present symbol resolves", "fnPresent", 0x1234, false},
		{"missing symbol names itself", "fnAbsent", 0, true},
		{"null address counts as missing", "fnZero", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := l.NewProc(1000, tt.symbol).Find()
			if !tt.missing {
				require.NoError(t, err)
				assert.Equal(t, tt.want, a)
				return
			}
			require.ErrorIs(t, err, errMissing)
			var me *missError
			require.True(t, errors.As(err, &me))
			assert.Equal(t, []string{tt.symbol}, me.Names)
			assert.Equal(t, 1000, me.Since)
			assert.False(t, me.Undeclared)
			assert.Same(t, lib, me.lib, "the hook sees the opened library")
			assert.Zero(t, a)
		})
	}
	assert.True(t, l.Loaded())
	assert.Equal(t, 1, *opens)
}

func TestLoaderCachesResolvedAddress(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{"fnPresent": 0x42}}
	l, _ := newTestLoader(lib, nil)
	p := l.NewProc(0, "fnPresent")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := p.Find()
			assert.NoError(t, err)
			assert.Equal(t, uintptr(0x42), a)
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, lib.lookups["fnPresent"], "one dlsym per symbol")

	// A missing symbol does not disturb the others.
	_, err := l.NewProc(0, "fnAbsent").Find()
	require.ErrorIs(t, err, errMissing)
	a, err := p.Find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(0x42), a)
}

func TestLoaderSwapForgetsAddresses(t *testing.T) {
	l, _ := newTestLoader(nil, errNotFound)
	p := l.NewProc(0, "fnSwapProbe")
	restore := l.Swap(func() (Library, error) {
		return &fakeLibrary{symbols: map[string]uintptr{"fnSwapProbe": 7}}, nil
	})
	a, err := p.Find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(7), a)
	assert.True(t, l.Loaded())
	restore()
	assert.False(t, l.Loaded(), "restoring forgets the opened library")
	_, err = p.Find()
	assert.ErrorIs(t, err, errNotFound, "the restored opener is used again")
	restore2 := l.Swap(func() (Library, error) { return nil, errNotFound })
	defer restore2()
	_, err = p.Find()
	assert.ErrorIs(t, err, errNotFound)
}

func TestLoaderFallsBackToOlderSymbol(t *testing.T) {
	tests := []struct {
		name    string
		symbols map[string]uintptr
		want    uintptr
		used    string
	}{
		{"newer symbol wins", map[string]uintptr{"fnNew_v2": 0x20, "fnNew": 0x10}, 0x20, "fnNew_v2"},
		{"older symbol when the newer is absent", map[string]uintptr{"fnNew": 0x10}, 0x10, "fnNew"},
		{"older symbol when the newer is null", map[string]uintptr{"fnNew_v2": 0, "fnNew": 0x10}, 0x10, "fnNew"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLoader(&fakeLibrary{symbols: tt.symbols}, nil)
			p := l.NewProc(2000, "fnNew_v2", "fnNew")
			assert.Empty(t, p.Symbol(), "nothing resolved yet")
			assert.Equal(t, []string{"fnNew_v2", "fnNew"}, p.Names())
			a, err := p.Find()
			require.NoError(t, err)
			assert.Equal(t, tt.want, a)
			assert.Equal(t, tt.used, p.Symbol())
		})
	}
}

func TestLoaderMissReportsFirstNameAndReason(t *testing.T) {
	l, _ := newTestLoader(&fakeLibrary{symbols: map[string]uintptr{}}, nil)
	_, err := l.NewProc(12080, "fnNew_v2", "fnNew").Find()
	var me *missError
	require.True(t, errors.As(err, &me), "got %v", err)
	assert.Equal(t, []string{"fnNew_v2", "fnNew"}, me.Names)
	assert.Equal(t, 12080, me.Since)
	require.Error(t, me.Err)
	assert.Equal(t, "fake: undefined symbol fnNew_v2", me.Err.Error(), "the first name's reason")
}

func TestLoaderCachesFailedLookups(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{}}
	l, _ := newTestLoader(lib, nil)
	p := l.NewProc(13000, "fnAbsent_v2", "fnAbsent")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Find()
			assert.ErrorIs(t, err, errMissing)
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, lib.lookups["fnAbsent_v2"], "one dlsym per symbol, failures included")
	assert.Equal(t, 1, lib.lookups["fnAbsent"])

	// A new library (Swap) forgets the failure: the symbol may exist there.
	restore := l.Swap(func() (Library, error) {
		return &fakeLibrary{symbols: map[string]uintptr{"fnAbsent": 9}}, nil
	})
	defer restore()
	a, err := p.Find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(9), a)
	assert.Equal(t, "fnAbsent", p.Symbol())
}

func TestLoaderUndeclaredProcNeverLooksUp(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{"fnFromNewerHeader": 5}}
	l, _ := newTestLoader(lib, nil)
	p := l.NewUndeclaredProc(13000, "fnFromNewerHeader")
	_, err := p.Find()
	var me *missError
	require.True(t, errors.As(err, &me), "got %v", err)
	assert.True(t, me.Undeclared)
	assert.Equal(t, 13000, me.Since)
	assert.NoError(t, me.Err, "nothing was looked up, so there is no reason")
	assert.Zero(t, lib.lookups["fnFromNewerHeader"], "the header lacked it: its C signature is not trusted")

	q := l.NewProc(13000, "fnFromNewerHeader")
	a, err := q.Find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(5), a, "a declared proc of the same name resolves")
}

func TestLoaderUndeclaredProcWithoutLibrary(t *testing.T) {
	l, _ := newTestLoader(nil, errNotFound)
	_, err := l.NewUndeclaredProc(13000, "fnFromNewerHeader").Find()
	assert.ErrorIs(t, err, errNotFound, "no library is reported before a missing symbol")
	assert.NotErrorIs(t, err, errMissing)
}

func TestLoaderProcsListsRegistrations(t *testing.T) {
	l, _ := newTestLoader(nil, errNotFound)
	a := l.NewProc(1, "a")
	b := l.NewUndeclaredProc(2, "b", "b0")
	assert.Equal(t, []*Proc{a, b}, l.Procs())
	l.Procs()[0] = nil
	assert.Same(t, a, l.Procs()[0], "the caller gets a copy")
}
