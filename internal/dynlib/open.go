package dynlib

import "os"

// OpenError is a shared library that dlopen could not load.
type OpenError struct {
	Path   string // the path or soname passed to dlopen
	Reason string // dlerror's text, or why nothing was tried
}

// Error returns "dlopen PATH: REASON".
func (e *OpenError) Error() string { return "dlopen " + e.Path + ": " + e.Reason }

// EnvOr returns the value of the environment variable env, or def when it is
// unset or empty.
func EnvOr(env, def string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	return def
}

// OpenFirst opens the first of paths that loads, with open (Open when nil).
// When none loads it returns a nil Library and every attempt's error, in
// order.
func OpenFirst(paths []string, open func(string) (Library, error)) (Library, []error) {
	if open == nil {
		open = func(p string) (Library, error) {
			lib, err := Open(p)
			if err != nil {
				return nil, err
			}
			return lib, nil
		}
	}
	var errs []error
	for _, p := range paths {
		lib, err := open(p)
		if err == nil {
			return lib, nil
		}
		errs = append(errs, err)
	}
	return nil, errs
}
