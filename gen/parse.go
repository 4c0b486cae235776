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
	lib       *library
	version   string // the header's version macro, digits only
	funcs     []*function
	enums     []enumDecl // typed enums from typeRules, in table order
	constants []constant // untyped flag constants
	warnings  []string   // entry points skipped and other non-fatal findings
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
	doc      string // documented name (cuMemAlloc)
	symbol   string // resolved symbol (cuMemAlloc_v2)
	fallback string // older symbol with the same C signature, or ""
	goName   string // wrapper name (MemAlloc)
	since    int    // CUDA version that introduced the oldest symbol it calls
	// undeclared is set when the header lacks the entry point: the wrapper is
	// generated from the entry's proto and always returns *MissingSymbolError.
	undeclared bool
	params     []*param
}

// protoPrefix names the declarations the generator appends for entries' protos.
const protoPrefix = "__vyre_gen_proto_"

// translate parses and type-checks the header at path with the host's
// predefined macros, appending probes that expand every wanted name and a
// declaration for every entry's proto.
func translate(path string, src []byte, lib *library) (*cc.AST, error) {
	cfg, err := cc.NewConfig(runtime.GOOS, runtime.GOARCH)
	if err != nil {
		return nil, fmt.Errorf("configure C front end: %v", err)
	}
	var probes strings.Builder
	probes.WriteString("#define __vyre_gen_str2(x) #x\n#define __vyre_gen_str(x) __vyre_gen_str2(x)\n")
	for i, e := range lib.entries {
		fmt.Fprintf(&probes, "static const char %s%d[] = __vyre_gen_str(%s);\n", probePrefix, i, e.name)
		if e.proto != "" {
			fmt.Fprintf(&probes, "%s %s%d(%s);\n", lib.status.c, protoPrefix, i, e.proto)
		}
	}
	sources := []cc.Source{
		{Name: "<predefined>", Value: cfg.Predefined + "\n"},
		{Name: "<builtin>", Value: cc.Builtin},
	}
	if lib.prelude != "" {
		sources = append(sources, cc.Source{Name: "<prelude>", Value: lib.prelude})
		src = dropIncludes(src, lib.replaceIncludes)
	}
	sources = append(sources, cc.Source{Name: path, Value: src}, cc.Source{Name: "<probes>", Value: probes.String()})
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

// build reads the header at path and classifies every entry point of lib.
func build(path string, lib *library) (*api, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read header: %v", err)
	}
	ast, err := translate(path, src, lib)
	if err != nil {
		return nil, err
	}
	a := &api{lib: lib}
	ver := -1 // a header without a version macro (nvrtc.h) skips the since checks
	if lib.versionMacro != "" {
		if m := ast.Macros[lib.versionMacro]; m != nil && !m.IsFnLike && len(m.ReplacementList()) == 1 {
			a.version = m.ReplacementList()[0].SrcStr()
		}
		v, err := strconv.ParseUint(a.version, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: no integer %s macro: is this %s?", path, lib.versionMacro, lib.header)
		}
		ver = int(v)
	}
	if err := a.collectEnums(ast); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	a.collectConstants(ast)

	symbols := probeResults(ast)
	owner := map[string]string{} // C symbol -> entry that binds it
	goNames := map[string]string{}
	for i, e := range lib.entries {
		sym := e.symbol
		if sym == "" {
			sym = symbols[i]
		}
		if sym == "" {
			return nil, fmt.Errorf("%s: internal error: probe for %s was not evaluated", path, e.name)
		}
		for _, s := range []string{sym, e.fallback} {
			if prev, dup := owner[s]; dup && s != "" {
				return nil, fmt.Errorf("entry table: %s and %s both resolve to the C symbol %s in %s; Fix: list that entry point once", prev, e.name, s, path)
			}
			if s != "" {
				owner[s] = e.name
			}
		}
		f, warns, err := a.entryFunc(ast, path, i, e, sym, ver)
		if err != nil {
			return nil, err
		}
		a.warnings = append(a.warnings, warns...)
		if prev, dup := goNames[f.goName]; dup {
			return nil, fmt.Errorf("entry table: %s and %s both become the Go function %s; Fix: list that entry point once", prev, e.name, f.goName)
		}
		goNames[f.goName] = e.name
		a.funcs = append(a.funcs, f)
	}
	return a, nil
}

// entryFunc classifies entry i, which resolves to sym, checking its since
// against the header's version ver (-1: unknown, not checked): from the
// header's declaration of sym, else of its fallback, else from its proto as an
// undeclared stub.
func (a *api) entryFunc(ast *cc.AST, path string, i int, e entry, sym string, ver int) (*function, []string, error) {
	d := fileScopeFunc(ast, sym)
	if d == nil && e.fallback != "" {
		d = fileScopeFunc(ast, e.fallback)
	}
	since := a.lib.version(e.since)
	header := a.lib.header
	if ver >= 0 {
		header = a.lib.version(ver)
	}
	switch {
	case e.since <= 0:
		return nil, nil, fmt.Errorf("entry table: %s has no since version; Fix: set since to the CUDA version that introduced it", e.name)
	case ver >= 0 && d != nil && ver < e.since:
		return nil, nil, fmt.Errorf("%s: %s declares %s, but the entry table says it appeared in %s; Fix: correct its since version", path, header, d.Name(), since)
	case ver >= 0 && d == nil && ver >= e.since:
		return nil, nil, fmt.Errorf("%s: %s does not declare %s (%s), which the entry table says appeared in %s; Fix: correct its since version or symbol", path, header, e.name, sym, since)
	case d == nil && e.proto == "":
		return nil, nil, fmt.Errorf("%s: %s (since %s) is not declared by this header (%s) and has no proto; Fix: give it a proto so the Go API does not depend on the header", path, e.name, since, header)
	}
	var pf *function
	if e.proto != "" {
		pd := fileScopeFunc(ast, fmt.Sprintf("%s%d", protoPrefix, i))
		if pd == nil {
			return nil, nil, fmt.Errorf("%s: internal error: proto of %s was not declared", path, e.name)
		}
		f, _, err := classify(a.lib, e, sym, pd)
		if err != nil {
			return nil, nil, fmt.Errorf("entry table: proto of %s: %v", e.name, err)
		}
		pf = f
	}
	if d == nil {
		pf.undeclared = true
		return pf, []string{fmt.Sprintf("%s: %s (%s) is not declared in this %s header: generated from its proto, returning *MissingSymbolError", path, e.name, sym, header)}, nil
	}
	f, warns, err := classify(a.lib, e, sym, d)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", d.Position(), err)
	}
	if pf != nil {
		if diff := paramsDiffer(pf.params, f.params); diff != "" {
			return nil, nil, fmt.Errorf("%s: the proto of %s disagrees with the header's %s: %s; Fix: make the proto match the header", path, e.name, d.Name(), diff)
		}
	}
	return f, warns, nil
}

// paramsDiffer describes the first difference between two parameter lists as
// the bindings see them, or returns "".
func paramsDiffer(want, got []*param) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d parameters, the header has %d", len(want), len(got))
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.goName != g.goName || w.goIn != g.goIn || w.goOut != g.goOut || w.abi != g.abi || w.cdecl != g.cdecl {
			return fmt.Sprintf("parameter %d is %s %s%s (C %s), the header's is %s %s%s (C %s)",
				i, w.goName, w.goIn, w.goOut, w.cdecl, g.goName, g.goIn, g.goOut, g.cdecl)
		}
	}
	return ""
}

// formatVersion spells a CUDA_VERSION-style number: 12040 is "CUDA 12.4".
func formatVersion(v int) string {
	return fmt.Sprintf("CUDA %d.%d", v/1000, v%1000/10)
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
	for _, r := range a.lib.types {
		if !r.enum {
			continue
		}
		vals, err := enumValues(ast, r.c)
		if err != nil {
			return err
		}
		if vals == nil {
			if r.c == a.lib.status.c {
				return fmt.Errorf("no %s enum typedef", r.c)
			}
			a.warnings = append(a.warnings, fmt.Sprintf("enum %s is not declared; %s has no constants", r.c, r.goTyp))
		}
		a.enums = append(a.enums, enumDecl{rule: r, values: vals})
	}
	return nil
}

func (a *api) collectConstants(ast *cc.AST) {
	for _, name := range a.lib.constantEnums {
		vals, err := enumValues(ast, name)
		if err != nil || vals == nil {
			a.warnings = append(a.warnings, fmt.Sprintf("flag enum %s is not declared; skipped", name))
			continue
		}
		a.constants = append(a.constants, vals...)
	}
	for _, name := range a.lib.constantMacros {
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

// dropIncludes blanks the #include lines of src that name one of headers
// (the prelude stands in for them), keeping line numbers.
func dropIncludes(src []byte, headers []string) []byte {
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "#") {
			continue
		}
		t = strings.TrimSpace(strings.TrimPrefix(t, "#"))
		if !strings.HasPrefix(t, "include") {
			continue
		}
		t = strings.TrimSpace(strings.TrimPrefix(t, "include"))
		for _, h := range headers {
			if t == "<"+h+">" || t == `"`+h+`"` {
				lines[i] = ""
			}
		}
	}
	return []byte(strings.Join(lines, "\n"))
}
