package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"modernc.org/cc/v4"
)

// probePrefix names the string constants the generator appends to the header so
// that the preprocessor itself resolves each documented name to its symbol.
const probePrefix = "__vyre_gen_probe_"

// api is everything the emitters need, taken from one header.
type api struct {
	version   string // the header's CUDA_VERSION, digits only
	funcs     []*function
	enums     []enumDecl // typed enums from typeRules, in table order
	constants []constant // untyped flag constants
	warnings  []string   // entry points skipped and other non-fatal findings
	library   *library   // the library's names; nil means the CUDA driver
}

// enumDecl is one C enum emitted as Go constants of goTyp.
type enumDecl struct {
	rule   typeRule
	values []constant
}

// constant is one named integer.
type constant struct {
	name  string
	value string
}

// function is one wrapped entry point.
type function struct {
	doc    string // documented name (cuMemAlloc)
	symbol string // resolved symbol (cuMemAlloc_v2)
	goName string // wrapper name (MemAlloc)
	params []*param
}

// translate parses and type-checks the header at path with the host's
// predefined macros, appending probes that expand every wanted name.
func translate(path string, src []byte, wanted []entry) (*cc.AST, error) {
	cfg, err := cc.NewConfig(runtime.GOOS, runtime.GOARCH)
	if err != nil {
		return nil, fmt.Errorf("configure C front end: %v", err)
	}
	var probes strings.Builder
	probes.WriteString("#define __vyre_gen_str2(x) #x\n#define __vyre_gen_str(x) __vyre_gen_str2(x)\n")
	for i, e := range wanted {
		fmt.Fprintf(&probes, "static const char %s%d[] = __vyre_gen_str(%s);\n", probePrefix, i, e.name)
	}
	sources := []cc.Source{
		{Name: "<predefined>", Value: cfg.Predefined + "\n"},
		{Name: "<builtin>", Value: cc.Builtin},
		{Name: path, Value: src},
		{Name: "<probes>", Value: probes.String()},
	}
	ast, err := cc.Translate(cfg, sources)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %v", path, firstLines(err.Error(), 5))
	}
	return ast, nil
}

// firstLines keeps an error report short: cc reports every error it saw.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("(%d more)", len(lines)-n))
	}
	return strings.Join(lines, "; ")
}

// probeResults maps each probe index to the symbol its name expanded to.
func probeResults(ast *cc.AST) map[int]string {
	out := map[int]string{}
	for tu := ast.TranslationUnit; tu != nil; tu = tu.TranslationUnit {
		ed := tu.ExternalDeclaration
		if ed == nil || ed.Declaration == nil {
			continue
		}
		for l := ed.Declaration.InitDeclaratorList; l != nil; l = l.InitDeclaratorList {
			id := l.InitDeclarator
			if id == nil || id.Declarator == nil || id.Initializer == nil {
				continue
			}
			name := id.Declarator.Name()
			if !strings.HasPrefix(name, probePrefix) {
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(name, probePrefix))
			if err != nil {
				continue
			}
			if s, err := strconv.Unquote(strings.TrimSpace(cc.NodeSource(id.Initializer))); err == nil {
				out[i] = s
			}
		}
	}
	return out
}

// build reads the header at path and classifies every wanted entry point.
func build(path string, wanted []entry) (*api, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read header: %v", err)
	}
	ast, err := translate(path, src, wanted)
	if err != nil {
		return nil, err
	}
	a := &api{}
	if m := ast.Macros["CUDA_VERSION"]; m != nil && !m.IsFnLike && len(m.ReplacementList()) == 1 {
		a.version = m.ReplacementList()[0].SrcStr()
	}
	if _, err := strconv.ParseUint(a.version, 10, 32); err != nil {
		return nil, fmt.Errorf("%s: no integer CUDA_VERSION macro: is this cuda.h?", path)
	}
	if err := a.collectEnums(ast); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	a.collectConstants(ast)

	symbols := probeResults(ast)
	seen := map[string]bool{}
	for i, e := range wanted {
		sym := symbols[i]
		if sym == "" {
			return nil, fmt.Errorf("%s: internal error: probe for %s was not evaluated", path, e.name)
		}
		d := fileScopeFunc(ast, sym)
		if d == nil {
			note := ""
			if e.optional {
				note = " (optional)"
			}
			a.warnings = append(a.warnings, fmt.Sprintf("%s: %s%s is not declared (looked for %s); skipped", path, e.name, note, sym))
			continue
		}
		f, warns, err := classify(e, sym, d)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", d.Position(), err)
		}
		a.warnings = append(a.warnings, warns...)
		if seen[f.goName] {
			return nil, fmt.Errorf("entry point list: %s listed twice", e.name)
		}
		seen[f.goName] = true
		a.funcs = append(a.funcs, f)
	}
	return a, nil
}

// fileScopeFunc finds a function declared at file scope.
func fileScopeFunc(ast *cc.AST, name string) *cc.Declarator {
	for _, n := range ast.Scope.Nodes[name] {
		if d, ok := n.(*cc.Declarator); ok && !d.IsTypename() {
			if _, ok := d.Type().(*cc.FunctionType); ok {
				return d
			}
		}
	}
	return nil
}

// typedefType finds the type a file-scope typedef names.
func typedefType(ast *cc.AST, name string) cc.Type {
	for _, n := range ast.Scope.Nodes[name] {
		if d, ok := n.(*cc.Declarator); ok && d.IsTypename() {
			return d.Type()
		}
	}
	return nil
}

// enumValues lists the enumerators of the enum a typedef names.
func enumValues(ast *cc.AST, typedef string) ([]constant, error) {
	t := typedefType(ast, typedef)
	if t == nil {
		return nil, nil
	}
	et, ok := t.(*cc.EnumType)
	if !ok {
		return nil, fmt.Errorf("%s is a %v, not an enum", typedef, t.Kind())
	}
	var out []constant
	for _, en := range et.Enumerators() {
		var v string
		switch x := en.Value().(type) {
		case cc.Int64Value:
			v = strconv.FormatInt(int64(x), 10)
		case cc.UInt64Value:
			v = strconv.FormatUint(uint64(x), 10)
		default:
			return nil, fmt.Errorf("%s: enumerator %s has no integer value", typedef, en.Token.SrcStr())
		}
		out = append(out, constant{name: en.Token.SrcStr(), value: v})
	}
	return out, nil
}

func (a *api) collectEnums(ast *cc.AST) error {
	for _, r := range typeRules {
		if !r.enum {
			continue
		}
		vals, err := enumValues(ast, r.c)
		if err != nil {
			return err
		}
		if vals == nil {
			if r.goTyp == "Result" {
				return fmt.Errorf("no CUresult enum typedef")
			}
			a.warnings = append(a.warnings, fmt.Sprintf("enum %s is not declared; %s has no constants", r.c, r.goTyp))
		}
		a.enums = append(a.enums, enumDecl{rule: r, values: vals})
	}
	return nil
}

func (a *api) collectConstants(ast *cc.AST) {
	for _, name := range constantEnums {
		vals, err := enumValues(ast, name)
		if err != nil || vals == nil {
			a.warnings = append(a.warnings, fmt.Sprintf("flag enum %s is not declared; skipped", name))
			continue
		}
		a.constants = append(a.constants, vals...)
	}
	for _, name := range constantMacros {
		m := ast.Macros[name]
		if m == nil || m.IsFnLike || len(m.ReplacementList()) != 1 {
			a.warnings = append(a.warnings, fmt.Sprintf("macro %s is not an integer constant; skipped", name))
			continue
		}
		lit := strings.TrimRight(m.ReplacementList()[0].SrcStr(), "uUlL")
		if _, err := strconv.ParseUint(lit, 0, 64); err != nil {
			a.warnings = append(a.warnings, fmt.Sprintf("macro %s is not an integer constant; skipped", name))
			continue
		}
		a.constants = append(a.constants, constant{name: name, value: lit})
	}
}
