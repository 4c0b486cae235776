package kernels

import (
	"strconv"
	"strings"
	"testing"
)

// body returns the PTX after its .address_size line, without the two
// grid-dependency instructions, and the lines of those instructions.
func body(t *testing.T, ptx []byte) (string, []string) {
	t.Helper()
	s := string(ptx)
	i := strings.Index(s, ".address_size 64")
	if i < 0 {
		t.Fatal("no .address_size directive")
	}
	var kept, pdl []string
	for _, l := range strings.Split(s[i:], "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "griddepcontrol.") {
			pdl = append(pdl, strings.TrimSpace(l))
			continue
		}
		kept = append(kept, l)
	}
	return strings.TrimRight(strings.Join(kept, "\n"), "\n"), pdl
}

// directive returns the operand of a PTX directive such as .version.
func directive(t *testing.T, ptx []byte, name string) string {
	t.Helper()
	for _, l := range strings.Split(string(ptx), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			return f[1]
		}
	}
	t.Fatalf("no %s directive", name)
	return ""
}

func TestSM90VariantsWaitBeforeGlobalMemory(t *testing.T) {
	pairs := []struct {
		name       string
		base, sm90 []byte
	}{
		{"fill", FillPTX, FillPTXSM90},
		{"copy", CopyPTX, CopyPTXSM90},
		{"vadd", VAddPTX, VAddPTXSM90},
		{"scale", ScalePTX, ScalePTXSM90},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			if got := directive(t, p.sm90, ".target"); got != "sm_90" {
				t.Fatalf(".target %s, want sm_90", got)
			}
			// griddepcontrol needs PTX ISA 7.8.
			v, err := strconv.ParseFloat(directive(t, p.sm90, ".version"), 64)
			if err != nil || v < 7.8 {
				t.Fatalf(".version %v (%v), want at least 7.8", v, err)
			}
			base, none := body(t, p.base)
			if len(none) != 0 {
				t.Fatalf("the portable image has %v", none)
			}
			variant, pdl := body(t, p.sm90)
			if base != variant {
				t.Fatal("the sm_90 image's code differs from the portable one beyond the grid-dependency instructions")
			}
			if len(pdl) != 2 || pdl[0] != "griddepcontrol.launch_dependents;" || pdl[1] != "griddepcontrol.wait;" {
				t.Fatalf("grid-dependency instructions %q", pdl)
			}
			// The wait comes before every global access and every branch,
			// so no path reaches memory without it.
			s := string(p.sm90)
			wait := strings.Index(s, "griddepcontrol.wait;")
			for _, op := range []string{"ld.global", "st.global", "atom.", "red.", "bra", "ret;"} {
				if i := strings.Index(s, op); i >= 0 && i < wait {
					t.Errorf("%s comes before griddepcontrol.wait", op)
				}
			}
		})
	}
}
