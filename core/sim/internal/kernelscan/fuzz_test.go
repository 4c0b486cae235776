package kernelscan

import (
	"slices"
	"testing"
)

// FuzzCheck feeds arbitrary text, entries and parameter kinds to Check: it
// must not panic, must give the same answer twice, and must place every
// diagnostic in a file it read, at a line from 1.
func FuzzCheck(f *testing.F) {
	f.Add(saxpy, "saxpy", []byte{2, 2, 1, 1}, "")
	f.Add(scaleTemplate, "scale<double>", []byte{2, 1, 1}, "")
	f.Add("#include \"h.h\"\n#define K __global__\nK void k(T *p) {}", "k", []byte{2}, "#define T float\n")
	f.Add("namespace a { template<typename T, int N = 2> __global__ void k(T p[N]) {} }", "a::k<int*>", []byte{2}, "")
	f.Add("R\"x(", "k<", []byte{}, "#if\n#elif\n#else\n#endif\n#endif")
	f.Add("/*", "&::k", []byte{0}, "'")
	f.Add("template<=1, typename = int, class...> __global__ void k(){}", "k<1>", []byte{}, "") // a parameter that is only a default
	f.Add("typedef;\nusing = ;\nusing x = ;\nnamespace = a;\nnamespace a::{ template<> __global__ void a::k<>(void) {} }", "a::k<>", []byte{}, "")
	f.Fuzz(func(t *testing.T, src, entry string, kinds []byte, header string) {
		params := make([]Kind, len(kinds))
		for i, k := range kinds {
			params[i] = Kind(k % 3)
		}
		in := Input{File: "f.cu", Source: src, Entry: entry, Params: params,
			Headers: map[string]string{"h.h": header}, Defines: map[string]string{"T": "float *"}}
		d := Check(in)
		if again := Check(in); !slices.Equal(d, again) {
			t.Fatalf("two checks disagree: %v and %v", d, again)
		}
		for _, x := range d {
			if x.File != "f.cu" && x.File != "h.h" || x.Line < 1 || x.Msg == "" {
				t.Fatalf("diagnostic out of place: %+v", x)
			}
		}
	})
}
