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
const readmeMarker = "<!-- usage-example: core.Example_readme -->"

// readmeExample returns the Go block that follows the marker, from README.md
// once the lead has merged the sections into it, else from README.usage.md.
func readmeExample(t *testing.T) (file, code string) {
	t.Helper()
	for _, name := range []string{"README.md", "README.usage.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			continue
		}
		text := string(data)
		i := strings.Index(text, readmeMarker)
		if i < 0 {
			continue
		}
		rest := text[i+len(readmeMarker):]
		start := strings.Index(rest, "```go\n")
		require.GreaterOrEqual(t, start, 0, "%s: no ```go block after the marker", name)
		rest = rest[start+len("```go\n"):]
		end := strings.Index(rest, "```")
		require.GreaterOrEqual(t, end, 0, "%s: the usage example's block is not closed", name)
		return name, rest[:end]
	}
	t.Fatalf("neither README.md nor README.usage.md holds %s", readmeMarker)
	return "", ""
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
// Example_readme in core/example_test.go, which CI compiles and runs, so the
// example a newcomer copies is known to work and to print what it says.
func TestReadmeUsageExample(t *testing.T) {
	name, code := readmeExample(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "core", "example_test.go"))
	require.NoError(t, err)
	example := string(src)

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, code, parser.ImportsOnly)
	require.NoError(t, err, "the README example must be valid Go")
	assert.Equal(t, "main", f.Name.Name)

	// main's body is the example's body up to its Output comment.
	readmeBody := between(t, name, code, "func main() {", "}")
	exampleBody := between(t, "Example_readme", example, "func Example_readme() {", "\t// Output:")
	assert.Equal(t, exampleBody, readmeBody, "func main in %s and Example_readme differ", name)

	// The helper, with its comment, is the same in both.
	helper := "// le32 packs uint32 values"
	i := strings.Index(code, helper)
	j := strings.Index(example, helper)
	require.True(t, i >= 0 && j >= 0, "both must define le32")
	readmeHelper := code[i:]
	exampleHelper := example[j:]
	exampleHelper = exampleHelper[:strings.Index(exampleHelper, "\n}\n")+3]
	assert.Equal(t, exampleHelper, readmeHelper)

	// Every import of the README is one the example file has, so the body
	// that compiles there compiles here.
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		require.NoError(t, err)
		assert.Contains(t, example, strconv.Quote(path), "import %s", path)
	}

	// The output the README promises is the one the example checks.
	out := between(t, "Example_readme", example, "func Example_readme() {", "}")
	last := strings.TrimPrefix(strings.TrimSpace(out[len(out)-1]), "// Output: ")
	readme, err := os.ReadFile(filepath.Join("..", "..", name))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "It prints `"+last+"`"),
		"%s must say the example prints %q, as Example_readme checks", name, last)
}
