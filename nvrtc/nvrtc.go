// Package nvrtc compiles CUDA C++ source for a device at run time, through
// NVIDIA's NVRTC, and remembers the results on disk so that a second process
// compiles nothing.
//
// A Compiler chooses the target from the device's compute capability: a
// cubin for that exact architecture when the NVRTC at hand supports it, else
// PTX for the newest virtual architecture it supports at or below the
// device's (the driver JIT-compiles PTX when loading it). Results are cached
// in a diskcache keyed by a hash of the source, the include sources, the
// options, the entry expression, the target and the NVRTC version; any
// change to one of them compiles afresh. The Toolchain interface is the seam
// to NVRTC, so the policy is tested without it.
//
// The package holds no device state: core.Backend.Compile feeds it a device's
// compute capability and loads what it returns.
package nvrtc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/diskcache"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

// CacheDirEnv names the environment variable that moves the default cache
// directory; the value "off" disables the disk cache.
const CacheDirEnv = "VYRECUDA_KERNEL_CACHE"

// DefaultCacheBytes caps the default cache's size.
const DefaultCacheBytes = 256 << 20

// Toolchain is the compiler behind a Compiler: the system's libnvrtc
// (System), or a fake in tests.
type Toolchain interface {
	// Version reports the compiler's major and minor version.
	Version() (major, minor int, err error)
	// SupportedArchs lists the architectures (major*10+minor) it compiles for.
	SupportedArchs() ([]int, error)
	// Compile runs one compilation.
	Compile(req nvrtcapi.Request) (nvrtcapi.Output, error)
}

// system is libnvrtc through nvrtcapi.
type system struct{}

// System returns the Toolchain over the libnvrtc the loader finds.
func System() Toolchain { return system{} }

// Version asks libnvrtc for its version.
func (system) Version() (int, int, error) {
	ma, mi, err := nvrtcapi.Version()
	return int(ma), int(mi), err
}

// SupportedArchs asks libnvrtc for the architectures it compiles for.
func (system) SupportedArchs() ([]int, error) { return nvrtcapi.SupportedArchs() }

// Compile runs one compilation through libnvrtc.
func (system) Compile(req nvrtcapi.Request) (nvrtcapi.Output, error) { return nvrtcapi.Compile(req) }

// Options are the compile options a caller chooses.
type Options struct {
	// Defines are preprocessor macros, passed as -DNAME=VALUE (or -DNAME
	// when VALUE is empty).
	Defines map[string]string
	// Headers are include files given as strings, by the name the source
	// #includes.
	Headers map[string]string
	// FastMath passes --use_fast_math.
	FastMath bool
	// Std selects the language dialect, e.g. "c++17" (-std=c++17); empty
	// keeps NVRTC's default.
	Std string
	// LineInfo passes -lineinfo (source lines for profilers).
	LineInfo bool
	// Extra are further NVRTC options, passed as given after the others.
	// The target architecture is the Compiler's choice: -arch and
	// --gpu-architecture are refused here.
	Extra []string
}

// flags renders the options as NVRTC arguments, in a stable order.
func (o Options) flags() []string {
	var out []string
	names := make([]string, 0, len(o.Defines))
	for n := range o.Defines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if v := o.Defines[n]; v != "" {
			out = append(out, "-D"+n+"="+v)
		} else {
			out = append(out, "-D"+n)
		}
	}
	if o.FastMath {
		out = append(out, "--use_fast_math")
	}
	if o.Std != "" {
		out = append(out, "-std="+o.Std)
	}
	if o.LineInfo {
		out = append(out, "-lineinfo")
	}
	return append(out, o.Extra...)
}

// headers returns the include files sorted by name.
func (o Options) headers() []nvrtcapi.Header {
	out := make([]nvrtcapi.Header, 0, len(o.Headers))
	for n, s := range o.Headers {
		out = append(out, nvrtcapi.Header{Name: n, Source: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Source is one kernel to compile.
type Source struct {
	Name string // file name in the compiler's messages; empty means "kernel.cu"
	Code string // CUDA C++ text
	// Entry names the kernel: an identifier ("saxpy") or a name expression
	// for a template instance ("scale<double>"). It is compiled as a name
	// expression, so the kernel needs no extern "C".
	Entry   string
	Options Options
}

// Result is a compiled kernel.
type Result struct {
	Image   []byte // cubin, or PTX text
	Symbol  string // the entry's symbol in Image (lowered name)
	Target  string // "sm_90" for a cubin, "compute_90" for PTX
	CUBIN   bool
	Version string // the NVRTC version, "13.0"
	Cached  bool   // read from the disk cache; no compilation ran
	Log     string // the compiler's warnings; empty for a cached result
}

// Compiler compiles through a Toolchain with an optional disk cache. It is
// safe for concurrent use.
type Compiler struct {
	tc    Toolchain
	cache *diskcache.Cache // nil: no disk cache

	calls atomic.Uint64 // compilations the Toolchain ran
	hits  atomic.Uint64 // results read from the cache

	once    sync.Once
	version string
	archs   []int
	infoErr error
}

// New returns a Compiler over tc that keeps results in cache (nil: none).
func New(tc Toolchain, cache *diskcache.Cache) *Compiler {
	return &Compiler{tc: tc, cache: cache}
}

var (
	defaultOnce     sync.Once
	defaultCompiler *Compiler
)

// Default returns the process-wide Compiler over the system's libnvrtc with
// the cache in DefaultCacheDir (capped at DefaultCacheBytes), or with no disk
// cache when $VYRECUDA_KERNEL_CACHE is "off" or the directory cannot be made.
func Default() *Compiler {
	defaultOnce.Do(func() {
		var cache *diskcache.Cache
		if dir, err := DefaultCacheDir(); err == nil {
			cache, _ = diskcache.Open(dir, DefaultCacheBytes)
		}
		defaultCompiler = New(System(), cache)
	})
	return defaultCompiler
}

// DefaultCacheDir returns $VYRECUDA_KERNEL_CACHE, or vyrecuda/kernels under
// os.UserCacheDir(); an error when the variable is "off" or there is no user
// cache directory.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(CacheDirEnv); d != "" {
		if d == "off" {
			return "", errors.New("nvrtc: disk cache disabled by " + CacheDirEnv)
		}
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "vyrecuda", "kernels"), nil
}

// Calls returns how many compilations the Toolchain has run.
func (c *Compiler) Calls() uint64 { return c.calls.Load() }

// CacheHits returns how many results came from the disk cache.
func (c *Compiler) CacheHits() uint64 { return c.hits.Load() }

// Cache returns the disk cache, or nil.
func (c *Compiler) Cache() *diskcache.Cache { return c.cache }

// info reads the toolchain's version and architectures once.
func (c *Compiler) info() (string, []int, error) {
	c.once.Do(func() {
		ma, mi, err := c.tc.Version()
		if err != nil {
			c.infoErr = err
			return
		}
		c.version = fmt.Sprintf("%d.%d", ma, mi)
		archs, err := c.tc.SupportedArchs()
		if err == nil {
			c.archs = slices.Sorted(slices.Values(archs))
		}
	})
	return c.version, c.archs, c.infoErr
}

// ChooseTarget returns the target for a device of compute capability cc
// (major*10+minor) given the architectures a compiler supports: a cubin for
// cc itself when supported, else PTX for the newest supported architecture
// below cc. With no list (an NVRTC too old to report one) it asks for PTX
// for cc. ok is false when every supported architecture is newer than cc.
func ChooseTarget(cc int, archs []int) (target string, cubin, ok bool) {
	if len(archs) == 0 {
		return "compute_" + strconv.Itoa(cc), false, true
	}
	best := -1
	for _, a := range archs {
		if a == cc {
			return "sm_" + strconv.Itoa(cc), true, true
		}
		if a < cc && a > best {
			best = a
		}
	}
	if best < 0 {
		return "", false, false
	}
	return "compute_" + strconv.Itoa(best), false, true
}

// UnsupportedDeviceError says the compiler cannot target the device.
type UnsupportedDeviceError struct {
	CC    int   // the device's major*10+minor
	Archs []int // what the compiler supports
}

// Error names the device and the compiler's range.
func (e *UnsupportedDeviceError) Error() string {
	return fmt.Sprintf("nvrtc: compute capability %d.%d is older than every architecture this NVRTC supports (%v); Fix: use an NVRTC from an older CUDA toolkit (VYRECUDA_LIBNVRTC)",
		e.CC/10, e.CC%10, e.Archs)
}

// Request returns the compilation a Compiler asks NVRTC for: src's text,
// file name ("kernel.cu" when empty), include files, options and entry as a
// name expression, with -arch=target appended unless target is empty, and
// CUBIN set to cubin. It refuses an empty entry and an option that chooses
// the architecture.
func (src Source) Request(target string, cubin bool) (nvrtcapi.Request, error) {
	if err := src.check(); err != nil {
		return nvrtcapi.Request{}, err
	}
	req := nvrtcapi.Request{Source: src.Code, Name: src.Name, Headers: src.Options.headers(), Options: src.Options.flags(),
		NameExpressions: []string{src.Entry}, CUBIN: cubin}
	if req.Name == "" {
		req.Name = "kernel.cu"
	}
	if target != "" {
		req.Options = append(req.Options, "-arch="+target)
	}
	return req, nil
}

// check refuses an empty entry and an option that chooses the architecture.
func (src Source) check() error {
	if src.Entry == "" {
		return errors.New("nvrtc: no entry; Fix: name the kernel (or a template instance) in Entry")
	}
	for _, o := range src.Options.Extra {
		if strings.HasPrefix(o, "-arch") || strings.HasPrefix(o, "--gpu-architecture") {
			return fmt.Errorf("nvrtc: option %q chooses the architecture; Fix: leave it out, the Compiler targets the device", o)
		}
	}
	return nil
}

// Compile compiles src for a device of compute capability major.minor, or
// returns the cached result of an identical earlier compilation.
func (c *Compiler) Compile(src Source, major, minor int) (Result, error) {
	if err := src.check(); err != nil {
		return Result{}, err
	}
	version, archs, err := c.info()
	if err != nil {
		return Result{}, err
	}
	cc := major*10 + minor
	target, cubin, ok := ChooseTarget(cc, archs)
	if !ok {
		return Result{}, &UnsupportedDeviceError{CC: cc, Archs: archs}
	}
	req, _ := src.Request(target, cubin) // src passed check above
	key := cacheKey(version, target, req.Name, req.Source, src.Entry, req.Options, req.Headers)
	res := Result{Target: target, CUBIN: cubin, Version: version}
	if c.cache != nil {
		if raw, ok := c.cache.Get(key); ok {
			if sym, img, ok := decodeEntry(raw); ok {
				c.hits.Add(1)
				res.Image, res.Symbol, res.Cached = img, sym, true
				return res, nil
			}
		}
	}
	c.calls.Add(1)
	out, err := c.tc.Compile(req)
	if err != nil {
		return Result{}, err
	}
	if len(out.Lowered) != 1 || len(out.Image) == 0 {
		return Result{}, fmt.Errorf("nvrtc: compiler returned %d bytes and %d symbols for one entry", len(out.Image), len(out.Lowered))
	}
	res.Image, res.Symbol, res.Log = out.Image, out.Lowered[0], out.Log
	if c.cache != nil {
		_ = c.cache.Put(key, encodeEntry(res.Symbol, res.Image)) // a cache that cannot write only costs a recompile
	}
	return res, nil
}

// cacheKey hashes everything a compilation's output depends on.
func cacheKey(version, target, name, code, entry string, opts []string, hdrs []nvrtcapi.Header) diskcache.Key {
	parts := [][]byte{[]byte("vyrecuda/nvrtc/1"), []byte(version), []byte(target), []byte(name), []byte(code), []byte(entry)}
	parts = append(parts, []byte(strconv.Itoa(len(opts))))
	for _, o := range opts {
		parts = append(parts, []byte(o))
	}
	parts = append(parts, []byte(strconv.Itoa(len(hdrs))))
	for _, h := range hdrs {
		parts = append(parts, []byte(h.Name), []byte(h.Source))
	}
	return diskcache.KeyOf(parts...)
}

// encodeEntry stores the symbol's length, the symbol, then the image.
func encodeEntry(sym string, img []byte) []byte {
	out := binary.AppendUvarint(nil, uint64(len(sym)))
	out = append(out, sym...)
	return append(out, img...)
}

func decodeEntry(raw []byte) (sym string, img []byte, ok bool) {
	n, k := binary.Uvarint(raw)
	if k <= 0 || n == 0 || n > uint64(len(raw)-k) || uint64(len(raw)-k)-n == 0 {
		return "", nil, false
	}
	return string(raw[k : k+int(n)]), raw[k+int(n):], true
}

// IsCompileError reports whether err is a compilation the compiler refused
// (its log holds the messages), as opposed to a missing library or a
// driver-side failure.
func IsCompileError(err error) (log string, ok bool) {
	var ce *nvrtcapi.CompileError
	if errors.As(err, &ce) {
		return strings.TrimSpace(ce.Log), true
	}
	return "", false
}
