// Command gen generates the cudaapi bindings from a C library's header.
//
// A library (library.go) is a header, an entry table, type rules, the loader
// its symbols register with and the output file names; -lib picks one (the
// CUDA driver, cuda.h, by default; nccl for NCCL's nccl.h, whose CUDA runtime
// includes a project-written prelude replaces). gen parses the header with
// modernc.org/cc/v4, preprocessed with the host C compiler's predefined
// macros so the header's own remapping macros decide each symbol (cuMemAlloc
// is resolved as cuMemAlloc_v2) unless the entry pins one, wraps every entry
// with the type rules, and writes z-prefixed Go files formatted with
// go/format.
//
// The Go API does not depend on the header: an entry point the header lacks
// is generated from its proto as a function returning *MissingSymbolError, and
// each entry's since version is checked against the header's. gen refuses a
// pointer it cannot classify safely and two entries that resolve to one C
// symbol.
//
// Usage (normally through `make generate CUDA_H=...` or `go generate ./cudaapi`):
//
//	go run ./gen [-lib driver|nccl] [-header cuda.h] [-out dir] [-pkg name]
//
// The header is -header, else the library's variable ($CUDA_H), else
// $CUDA_HOME/include/cuda.h, else /usr/local/cuda/include/cuda.h.
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
	header := fs.String("header", "", "path to the library's header (default $CUDA_H, then $CUDA_HOME/include/cuda.h for -lib driver)")
	out := fs.String("out", ".", "directory to write the z*.go files into")
	pkg := fs.String("pkg", "cudaapi", "package name of the generated files")
	libName := fs.String("lib", "driver", "library to bind: "+libraryNames())
	if err := fs.Parse(args); err != nil {
		return 2
	}
	lib, err := lookupLibrary(*libName)
	if err != nil {
		fmt.Fprintf(stderr, "gen: %v\n", err)
		return 2
	}
	path, err := findHeader(lib, *header, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "gen: %v\n", err)
		return 1
	}
	files, warnings, err := generate(path, *pkg, lib)
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

// generate parses the header and renders lib's bindings.
func generate(path, pkg string, lib *library) ([]file, []string, error) {
	a, err := build(path, lib)
	if err != nil {
		return nil, nil, err
	}
	files, err := emit(a, pkg)
	return files, a.warnings, err
}

// findHeader picks the header path and checks it exists; the error lists every
// place it looked.
func findHeader(lib *library, flagPath string, getenv func(string) string) (string, error) {
	var tried []string
	envWhy := "$" + lib.headerEnv
	candidates := []struct{ path, why string }{{flagPath, "-header"}, {getenv(lib.headerEnv), envWhy}}
	home := getenv("CUDA_HOME")
	if home != "" {
		candidates = append(candidates, struct{ path, why string }{filepath.Join(home, "include", lib.header), "$CUDA_HOME/include"})
	} else {
		candidates = append(candidates, struct{ path, why string }{filepath.Join("/usr/local/cuda/include", lib.header), "default CUDA_HOME"})
	}
	for _, c := range candidates {
		if c.path == "" {
			continue
		}
		if st, err := os.Stat(c.path); err == nil && !st.IsDir() {
			return c.path, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", c.path, c.why))
		if c.why == "-header" || c.why == envWhy {
			break // an explicit choice that is missing is an error, not a hint to look elsewhere
		}
	}
	return "", fmt.Errorf("%s not found; looked in %s; Fix: pass -header or set %s to a CUDA toolkit's include/%s", lib.header, strings.Join(tried, ", "), lib.headerEnv, lib.header)
}

// writeIfChanged leaves an identical file untouched, so regenerating keeps
// modification times and build caches.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return os.WriteFile(path, data, 0o644)
}
