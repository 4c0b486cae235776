package main

import (
	"fmt"
	"go/token"
	"regexp"
	"sort"
	"strings"

	"modernc.org/cc/v4"
)

// param is one C parameter and everything the emitters say about it.
type param struct {
	cName  string // name in the header (or pN when unnamed)
	goName string // Go identifier for it
	abi    string // C type of the trampoline parameter, as cgo sees it
	cdecl  string // C type in the function-pointer typedef (no CUDA typedefs)

	goIn  string // Go parameter type; empty when the wrapper computes it
	goOut string // Go result type; empty unless it is an out-parameter

	pre  []string // Go statements before the call
	arg  string   // Go expression passed to the trampoline
	post string   // Go statement after a successful call, filling the result
	zero string   // zero value of goOut

	lenOf []string // for a length parameter derived from slices: those slices
}

// versionSuffix matches the _vN suffix the naming rule strips.
var versionSuffix = regexp.MustCompile(`_v[0-9]+$`)

// goFuncName applies the naming rule: strip the cu prefix and any _vN suffix.
func goFuncName(doc string) string { return goFuncNameFor(doc, "cu") }

// goFuncNameFor is the naming rule for a library whose names start with
// prefix (cu, nvrtc).
func goFuncNameFor(doc, prefix string) string {
	n := versionSuffix.ReplaceAllString(strings.TrimPrefix(doc, prefix), "")
	return strings.ToUpper(n[:1]) + n[1:]
}

// reserved are identifiers a parameter must not take: Go keywords and
// predeclared names the wrappers use, and the wrappers' own locals.
var reserved = map[string]bool{
	"fn": true, "r": true, "err": true, "error": true, "string": true, "len": true,
	"nil": true, "unsafe": true, "C": true, "uintptr": true, "bool": true, "int": true,
	"uint32": true, "uint64": true, "int32": true, "float32": true, "cap": true,
	"new": true, "make": true, "copy": true, "true": true, "false": true,
}

// goParamName makes a C parameter name a camelCase Go identifier: the first
// letter lower-cased (ByteCount becomes byteCount), underscores dropped with
// the letter after each upper-cased (pool_out becomes poolOut), and reserved
// identifiers avoided.
func goParamName(c string) string {
	parts := strings.Split(c, "_")
	var b strings.Builder
	for _, part := range parts {
		if part == "" {
			continue
		}
		if b.Len() == 0 {
			b.WriteString(strings.ToLower(part[:1]) + part[1:])
		} else {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	c = b.String()
	if c == "" {
		c = "p"
	}
	if token.IsKeyword(c) || reserved[c] {
		return c + "Arg"
	}
	return c
}

// mapped reports how a non-pointer C type travels, or ok=false.
func mapped(lib *library, t cc.Type) (r typeRule, ok bool) {
	if td := t.Typedef(); td != nil {
		if r, ok := lib.ruleByTypedef(td.Name()); ok {
			if r.class == classHandle {
				r.abi = "uintptr_t"
			}
			return r, true
		}
	}
	if b, ok := kindRules[t.Kind()]; ok {
		return typeRule{goTyp: b.goTyp, abi: b.abi}, true
	}
	return typeRule{}, false
}

// cdeclOf spells a mapped type for the function-pointer typedef.
func cdeclOf(r typeRule) string {
	if r.class == classHandle {
		return "void*"
	}
	return r.abi
}

func zeroOf(goTyp string) string {
	switch {
	case goTyp == "string":
		return `""`
	case goTyp == "unsafe.Pointer" || strings.HasPrefix(goTyp, "[]"):
		return "nil"
	}
	return "0"
}

// classify turns a declarator into a wrapper description.
func classify(lib *library, e entry, symbol string, d *cc.Declarator) (*function, []string, error) {
	ft := d.Type().(*cc.FunctionType)
	if ft.IsVariadic() {
		return nil, nil, fmt.Errorf("%s: variadic functions are not supported", symbol)
	}
	if td := ft.Result().Typedef(); td == nil || td.Name() != lib.status.c {
		return nil, nil, fmt.Errorf("%s: returns %v, not %s", symbol, ft.Result(), lib.status.c)
	}
	f := &function{doc: e.name, symbol: symbol, goName: goFuncName(e.name), since: e.since}
	if lib.prefix != "" {
		f.goName = goFuncNameFor(e.name, lib.prefix)
	}
	if e.goName != "" {
		f.goName = e.goName
	}
	if e.fallback != "" && e.fallback != symbol {
		f.fallback = e.fallback
	}
	var warns []string
	used := map[string]bool{}
	byName := map[string]*param{}
	for i, cp := range ft.Parameters() {
		name := cp.Name()
		if name == "" {
			name = fmt.Sprintf("p%d", i)
		}
		if cp.Type().Kind() == cc.Void && len(ft.Parameters()) == 1 {
			break // f(void)
		}
		ro := e.roles[name]
		if ro.kind != roleAuto {
			used[name] = true
		}
		p, err := classifyParam(lib, name, cp.Type(), ro)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: parameter %s: %v", symbol, name, err)
		}
		f.params = append(f.params, p)
		byName[name] = p
	}
	var unused []string
	for name := range e.roles {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused) // map order must not reach the output
	for _, name := range unused {
		warns = append(warns, fmt.Sprintf("%s: role for parameter %s names no parameter of %s", e.name, name, symbol))
	}
	// Length parameters named by slice and text roles are computed by the wrapper.
	for _, p := range f.params {
		ro := e.roles[p.cName]
		if ro.kind != roleSlice && ro.kind != roleOutText {
			continue
		}
		lp := byName[ro.lenParam]
		if lp == nil || (lp.goIn == "" && len(lp.lenOf) == 0) || strings.HasPrefix(lp.goIn, "[]") || lp.goIn == "unsafe.Pointer" || lp.goIn == "string" {
			return nil, nil, fmt.Errorf("%s: parameter %s: length parameter %q is not an integer parameter", symbol, p.cName, ro.lenParam)
		}
		if ro.kind == roleOutText {
			lp.arg = fmt.Sprintf("%s(len(%sBuf))", cgoNames[lp.abi], p.goName)
		} else {
			if len(lp.lenOf) == 0 {
				lp.arg = fmt.Sprintf("%s(len(%s))", cgoNames[lp.abi], p.goName)
			}
			lp.lenOf = append(lp.lenOf, p.goName)
		}
		lp.goIn = ""
	}
	return f, warns, nil
}

// classifyParam applies a role, or the default rules, to one parameter.
func classifyParam(lib *library, name string, t cc.Type, ro role) (*param, error) {
	p := &param{cName: name, goName: goParamName(name)}
	if t.Kind() == cc.Array {
		t = t.Decay()
	}
	if ro.kind != roleAuto {
		if err := classifyRole(lib, p, t, ro); err != nil {
			return nil, err
		}
		return p, nil
	}
	if r, ok := mapped(lib, t); ok && r.class == classHandle {
		p.goIn, p.abi, p.cdecl = r.goTyp, r.abi, cdeclOf(r)
		p.arg = fmt.Sprintf("%s(%s)", cgoNames[r.abi], p.goName)
		return p, nil
	} else if ok && r.class == classStruct && t.Kind() != cc.Ptr {
		// The Go type has the struct's size and layout; reinterpret it.
		p.goIn, p.abi, p.cdecl = r.goTyp, r.abi, r.abi
		p.arg = fmt.Sprintf("*(*C.%s)(unsafe.Pointer(&%s))", r.abi, p.goName)
		return p, nil
	}
	switch t.Kind() {
	case cc.Ptr:
	case cc.Struct, cc.Union:
		return nil, fmt.Errorf("%v passed by value is not supported: add a rule or pass it by pointer", t)
	default:
		r, ok := mapped(lib, t)
		if !ok {
			return nil, fmt.Errorf("no Go type for %v: add a rule to typeRules", t)
		}
		p.goIn, p.abi, p.cdecl = r.goTyp, r.abi, cdeclOf(r)
		p.arg = fmt.Sprintf("%s(%s)", cgoNames[r.abi], p.goName)
		return p, nil
	}
	if err := classifyPointer(lib, p, t.(*cc.PointerType).Elem()); err != nil {
		return nil, err
	}
	return p, nil
}

// rawPointer makes p an untyped pointer argument.
func rawPointer(p *param) {
	p.goIn, p.abi, p.cdecl, p.arg = "unsafe.Pointer", "void*", "void*", p.goName
}

// classifyRole fills p for a parameter whose entry gives it an explicit role.
func classifyRole(lib *library, p *param, t cc.Type, ro role) error {
	switch ro.kind {
	case roleRaw:
		if t.Kind() != cc.Ptr {
			return fmt.Errorf("raw role needs a pointer, have %v", t)
		}
		rawPointer(p)
		return nil
	case roleSlice:
		pt, ok := t.(*cc.PointerType)
		if !ok {
			return fmt.Errorf("slice role needs a pointer, have %v", t)
		}
		r, ok := mapped(lib, pt.Elem())
		if !ok {
			return fmt.Errorf("slice role: no Go type for %v", pt.Elem())
		}
		p.goIn, p.abi, p.cdecl = "[]"+r.goTyp, r.abi+"*", cdeclOf(r)+"*"
		p.arg = fmt.Sprintf("(*%s)(unsafe.Pointer(unsafe.SliceData(%s)))", cgoNames[r.abi], p.goName)
		return nil
	case roleDevPtr:
		if t.Kind() != cc.Ptr {
			return fmt.Errorf("device-pointer role needs a pointer, have %v", t)
		}
		p.goIn, p.abi, p.cdecl = "uint64", "uintptr_t", "void*"
		p.arg = fmt.Sprintf("C.uintptr_t(%s)", p.goName)
		return nil
	case roleOutText:
		pt, ok := t.(*cc.PointerType)
		if !ok || pt.Elem().Kind() != cc.Char {
			return fmt.Errorf("text role needs a char pointer, have %v", t)
		}
		p.goOut, p.zero, p.abi, p.cdecl = "string", `""`, "char*", "char*"
		p.pre = []string{fmt.Sprintf("var %sBuf [256]C.char", p.goName)}
		p.arg = fmt.Sprintf("&%sBuf[0]", p.goName)
		p.post = fmt.Sprintf("%s = C.GoString(&%sBuf[0])", p.goName, p.goName)
		return nil
	}
	return fmt.Errorf("unknown role %v", ro.kind)
}

// classifyPointer fills p for a pointer parameter without a role, from the
// type it points to.
func classifyPointer(lib *library, p *param, elem cc.Type) error {
	elemConst := elem.Attributes().IsConst()
	switch {
	case elem.Kind() == cc.Void:
		rawPointer(p)
	case elem.Kind() == cc.Char && elemConst:
		p.goIn, p.abi, p.cdecl = "string", "const char*", "const char*"
		cs := "c" + strings.ToUpper(p.goName[:1]) + p.goName[1:]
		p.pre = []string{
			fmt.Sprintf("%s := C.CString(%s)", cs, p.goName),
			fmt.Sprintf("defer C.free(unsafe.Pointer(%s))", cs),
		}
		p.arg = cs
	case elemConst:
		rawPointer(p)
	case elem.Kind() == cc.Ptr:
		inner := elem.(*cc.PointerType).Elem()
		switch {
		case inner.Kind() == cc.Void:
			p.goOut, p.zero, p.abi, p.cdecl = "unsafe.Pointer", "nil", "void**", "void**"
			p.arg = "&" + p.goName
		case inner.Kind() == cc.Char && inner.Attributes().IsConst():
			p.goOut, p.zero, p.abi, p.cdecl = "string", `""`, "const char**", "const char**"
			p.pre = []string{fmt.Sprintf("var %sC *C.char", p.goName)}
			p.arg = "&" + p.goName + "C"
			p.post = fmt.Sprintf("%s = C.GoString(%sC)", p.goName, p.goName)
		default:
			if r, ok := mapped(lib, elem); ok && r.class == classHandle {
				outValue(p, r)
			} else {
				rawPointer(p)
			}
		}
	case isChar(elem):
		// A non-const char* may be a buffer the callee fills (with a length
		// elsewhere) or one char: guessing wrong lets the driver write past a
		// one-byte Go value, so it needs an explicit role.
		return fmt.Errorf("non-const %v pointer cannot be classified safely; Fix: give it a role in the entry table (outText with its length parameter, slice, or raw)", elem)
	default:
		if r, ok := mapped(lib, elem); ok {
			outValue(p, r)
		} else {
			rawPointer(p) // struct, union or function pointer
		}
	}
	return nil
}

// outValue makes p an out-parameter returned as r's Go type.
func outValue(p *param, r typeRule) {
	p.goOut, p.zero = r.goTyp, zeroOf(r.goTyp)
	p.abi, p.cdecl = r.abi+"*", cdeclOf(r)+"*"
	cname := cgoNames[r.abi]
	if r.class == classStruct {
		p.zero, cname = r.goTyp+"{}", "C."+r.abi
	}
	p.arg = fmt.Sprintf("(*%s)(unsafe.Pointer(&%s))", cname, p.goName)
}

// isChar reports whether t is one of C's three char types.
func isChar(t cc.Type) bool {
	switch t.Kind() {
	case cc.Char, cc.SChar, cc.UChar:
		return true
	}
	return false
}
