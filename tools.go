//go:build tools

// Package tools pins the versions of the command-line tools the project runs
// through `go run` (see the Makefile), so every machine uses the same ones.
package tools

import (
	_ "golang.org/x/tools/cmd/stringer"
)
