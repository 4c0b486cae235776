// Command gen generates the cudaapi bindings from a cuda.h.
//
// It parses the header with modernc.org/cc/v4 (preprocessed with the host C
// compiler's predefined macros, so the header's own remapping macros decide
// each symbol: cuMemAlloc is resolved as cuMemAlloc_v2), wraps the entry
// points listed in api.go with the type rules in types.go, and writes
// z-prefixed Go files formatted with go/format. Entry points the header
// lacks are reported on stderr and skipped, so older headers still work.
//
// Usage (normally through `make generate CUDA_H=...` or `go generate ./cudaapi`):
//
//	go run ./gen [-lib cuda|nvrtc] [-header cuda.h] [-out dir] [-pkg name]
//
// The header is -header, else $CUDA_H, else $CUDA_HOME/include/cuda.h, else
// /usr/local/cuda/include/cuda.h. With -lib nvrtc it binds the runtime
// compiler instead (nvrtc.h, $NVRTC_H; the table in api_nvrtc.go) and writes
// the znvrtc_*.go files of package nvrtcapi.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is main without the process: it returns the exit status.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	header := fs.String("header", "", "path to cuda.h (default $CUDA_H, then $CUDA_HOME/include/cuda.h)")
	out := fs.String("out", ".", "directory to write the z*.go files into")
	pkg := fs.String("pkg", "cudaapi", "package name of the generated files")
	lib := fs.String("lib", "cuda", "library to bind: cuda (cuda.h, $CUDA_H) or nvrtc (nvrtc.h, $NVRTC_H)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *lib != "cuda" && *lib != "nvrtc" {
		fmt.Fprintf(stderr, "gen: unknown -lib %q; Fix: pass -lib cuda or -lib nvrtc\n", *lib)
		return 2
	}
	var path string
	var err error
	if *lib == "nvrtc" {
		path, err = findHeaderFor(*header, os.Getenv, "nvrtc.h", "NVRTC_H")
	} else {
		path, err = findHeader(*header, os.Getenv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gen: %v\n", err)
		return 1
	}
	gen := generate
	wanted := entryPoints
	if *lib == "nvrtc" {
		gen, wanted = generateNvrtc, nvrtcEntryPoints
	}
	files, warnings, err := gen(path, *pkg, wanted)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "gen: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gen: %v\n", err)
		return 1
	}
	for _, f := range files {
		if err := writeIfChanged(filepath.Join(*out, f.name), f.data); err != nil {
			fmt.Fprintf(stderr, "gen: %v\n", err)
			return 1
		}
	}
	return 0
}

// generate parses the header and renders the bindings.
func generate(path, pkg string, wanted []entry) ([]file, []string, error) {
	a, err := build(path, wanted)
	if err != nil {
		return nil, nil, err
	}
	files, err := emit(a, pkg)
	return files, a.warnings, err
}

// findHeader picks the header path and checks it exists; the error lists every
// place it looked.
func findHeader(flagPath string, getenv func(string) string) (string, error) {
	return findHeaderFor(flagPath, getenv, "cuda.h", "CUDA_H")
}

// findHeaderFor is findHeader for the header named name, whose path variable
// is env.
func findHeaderFor(flagPath string, getenv func(string) string, name, env string) (string, error) {
	var tried []string
	candidates := []struct{ path, why string }{{flagPath, "-header"}, {getenv(env), "$" + env}}
	home := getenv("CUDA_HOME")
	if home != "" {
		candidates = append(candidates, struct{ path, why string }{filepath.Join(home, "include", name), "$CUDA_HOME/include"})
	} else {
		candidates = append(candidates, struct{ path, why string }{"/usr/local/cuda/include/" + name, "default CUDA_HOME"})
	}
	for _, c := range candidates {
		if c.path == "" {
			continue
		}
		if st, err := os.Stat(c.path); err == nil && !st.IsDir() {
			return c.path, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", c.path, c.why))
		if c.why == "-header" || c.why == "$"+env {
			break // an explicit choice that is missing is an error, not a hint to look elsewhere
		}
	}
	return "", fmt.Errorf("%s not found; looked in %s; Fix: pass -header or set %s to a CUDA toolkit's include/%s", name, strings.Join(tried, ", "), env, name)
}

// writeIfChanged leaves an identical file untouched, so regenerating keeps
// modification times and build caches.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return os.WriteFile(path, data, 0o644)
}
