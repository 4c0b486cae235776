package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeMarker precedes the README's usage example.
const readmeMarker = "<!-- usage-example: core.Example -->"

// exampleFile holds the package example the README's example copies.
const exampleFile = "example_start_test.go"

// readmeExample returns the Go block that follows the marker in README.md.
func readmeExample(t *testing.T) (file, code string) {
	t.Helper()
	const name = "README.md"
	data, err := os.ReadFile(filepath.Join("..", "..", name))
	require.NoError(t, err)
	text := string(data)
	i := strings.Index(text, readmeMarker)
	require.GreaterOrEqual(t, i, 0, "%s holds no %s", name, readmeMarker)
	rest := text[i+len(readmeMarker):]
	start := strings.Index(rest, "```go\n")
	require.GreaterOrEqual(t, start, 0, "%s: no ```go block after the marker", name)
	rest = rest[start+len("```go\n"):]
	end := strings.Index(rest, "```")
	require.GreaterOrEqual(t, end, 0, "%s: the usage example's block is not closed", name)
	return name, rest[:end]
}

// between returns the lines after the first line equal to from, up to (not
// including) the first later line that starts with to.
func between(t *testing.T, what, text, from, to string) []string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if l != from {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], to) {
				return lines[i+1 : j]
			}
		}
	}
	t.Fatalf("%s: no %q ... %q", what, from, to)
	return nil
}

// TestReadmeUsageExample keeps the README's usage example identical to
// Example in core/example_start_test.go, which CI compiles and runs, so the
// example a newcomer copies is known to work and to print what it says.
func TestReadmeUsageExample(t *testing.T) {
	name, code := readmeExample(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "core", exampleFile))
	require.NoError(t, err)
	example := string(src)

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, code, parser.ImportsOnly)
	require.NoError(t, err, "the README example must be valid Go")
	assert.Equal(t, "main", f.Name.Name)

	// main's body is the example's body up to its Output comment.
	readmeBody := between(t, name, code, "func main() {", "}")
	exampleBody := between(t, "Example", example, "func Example() {", "\t// Output:")
	assert.Equal(t, exampleBody, readmeBody, "func main in %s and Example differ", name)

	// Whatever the README defines after main (helpers, with their comments)
	// the example file defines the same way.
	i := strings.Index(code, "\nfunc main() {")
	require.GreaterOrEqual(t, i, 0)
	j := strings.Index(code[i:], "\n}\n")
	require.GreaterOrEqual(t, j, 0, "%s: main is not closed", name)
	if helpers := strings.TrimSpace(code[i+j+3:]); helpers != "" {
		assert.Contains(t, example, helpers, "the helpers after main in %s", name)
	}

	// Every import of the README is one the example file has, so the body
	// that compiles there compiles here.
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		require.NoError(t, err)
		assert.Contains(t, example, strconv.Quote(path), "import %s", path)
	}

	// The output the README promises is the one the example checks.
	out := between(t, "Example", example, "func Example() {", "}")
	last := strings.TrimPrefix(strings.TrimSpace(out[len(out)-1]), "// Output: ")
	readme, err := os.ReadFile(filepath.Join("..", "..", name))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "It prints `"+last+"`"),
		"%s must say the example prints %q, as Example checks", name, last)
}
