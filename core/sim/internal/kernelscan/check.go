package kernelscan

import (
	"fmt"
	"strings"
)

// Kind is what a kernel parameter is, as far as a declaration shows.
type Kind uint8

// The kinds. Any matches both; a caller uses it for a type it cannot map.
const (
	Any Kind = iota
	Scalar
	Pointer
)

// String returns "a pointer", "a scalar" or "any".
func (k Kind) String() string {
	switch k {
	case Scalar:
		return "a scalar"
	case Pointer:
		return "a pointer"
	}
	return "any"
}

// Diag is one error, placed where the compiler places its messages.
type Diag struct {
	File string // the source's or a header's name
	Line int    // from 1
	Msg  string
	Text string // the line's text, trimmed; empty when unknown
}

// Input is one compilation to check.
type Input struct {
	File    string            // the source's name in diagnostics, e.g. "saxpy.cu"
	Source  string            // the CUDA C++ text
	Headers map[string]string // include files given as strings, by name
	Defines map[string]string // -D macros by name and value
	// Entry is the kernel as NVRTC's name expression names it: an
	// identifier, "ns::k", or a template instance "scale<float>".
	Entry  string
	Params []Kind // the parameters the caller declares, in order
}

// Check returns what the scanner can see NVRTC refusing in in: lexical
// errors (an unclosed comment or literal, #error, an #if without #endif),
// unbalanced brackets, an entry that is not a defined __global__ function
// (or a template instance that does not fit its template), and parameters
// whose count or pointer/scalar kinds differ from in.Params. None means the
// scanner accepts the source.
func Check(in Input) []Diag {
	lx := newLexer(in.Headers, in.Defines)
	lx.file(in.File, in.Source, 0)
	if len(lx.diags) > 0 {
		return lx.diags
	}
	if d, ok := lx.balance(in.File, strings.Count(strings.TrimRight(in.Source, " \t\r\n"), "\n")+1); !ok {
		return []Diag{d}
	}
	u := declarations(lx.toks)
	return u.entry(in, lx)
}

// closers pairs each opening bracket with its closer.
var closers = map[string]string{"(": ")", "[": "]", "{": "}"}

// balance checks that brackets nest; lines is the main file's last line
// with text, where an unclosed one is reported.
func (lx *lexer) balance(file string, lines int) (Diag, bool) {
	var open []token
	for _, t := range lx.toks {
		if t.kind != tokPunct {
			continue
		}
		switch t.text {
		case "(", "[", "{":
			open = append(open, t)
		case ")", "]", "}":
			if len(open) == 0 {
				return lx.diag(t.file, t.line, fmt.Sprintf("unbalanced %q: nothing before it opens one", t.text)), false
			}
			top := open[len(open)-1]
			if want := closers[top.text]; want != t.text {
				return lx.diag(t.file, t.line, fmt.Sprintf("expected a %q before this %q: the %q %s is not closed", want, t.text, top.text, where(top, t.file))), false
			}
			open = open[:len(open)-1]
		}
	}
	if len(open) > 0 {
		top := open[len(open)-1]
		return lx.diag(file, lines, fmt.Sprintf("expected a %q at the end of the file: the %q %s is never closed", closers[top.text], top.text, where(top, file))), false
	}
	return Diag{}, true
}

func (lx *lexer) diag(file string, line int, msg string) Diag {
	return Diag{File: file, Line: line, Msg: msg, Text: lineOf(lx.sources[file], line)}
}

// where places t for a message about file.
func where(t token, file string) string {
	if t.file == file {
		return fmt.Sprintf("on line %d", t.line)
	}
	return fmt.Sprintf("at %s(%d)", t.file, t.line)
}

// nameExpr is a parsed entry: a qualified name and its template arguments.
type nameExpr struct {
	name    string
	args    []string
	hasArgs bool
}

// parseEntry reads a name expression; problem says why it is not one.
func parseEntry(s string) (e nameExpr, problem string) {
	s = strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "&")), "::")
	base := s
	if i := strings.IndexByte(s, '<'); i >= 0 {
		if !strings.HasSuffix(s, ">") {
			return e, "its template argument list does not end with '>'"
		}
		base, e.hasArgs = s[:i], true
		args, ok := splitArgs(s[i+1 : len(s)-1])
		if !ok {
			return e, "its template arguments are not balanced"
		}
		e.args = args
	}
	base = strings.Join(strings.Fields(base), "")
	for _, part := range strings.Split(base, "::") {
		if !isIdent(part) {
			return e, "it does not start with a function's name"
		}
	}
	e.name = base
	return e, ""
}

// splitArgs splits template arguments at commas outside brackets.
func splitArgs(s string) ([]string, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, true
	}
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<', '(', '[':
			depth++
		case '>', ')', ']':
			depth--
			if depth < 0 {
				return nil, false
			}
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	out = append(out, strings.TrimSpace(s[start:]))
	for _, a := range out {
		if a == "" {
			return nil, false
		}
	}
	return out, depth == 0
}

// matches reports whether the entry names k.
func (e nameExpr) matches(k kernel, usingNS bool) bool {
	return k.name == e.name || k.bare == e.name || usingNS && strings.HasSuffix("::"+k.name, "::"+e.name)
}

// entry checks the entry against the kernels the unit defines.
func (u unit) entry(in Input, lx *lexer) []Diag {
	e, problem := parseEntry(in.Entry)
	if problem != "" {
		return []Diag{lx.diag(in.File, 1, fmt.Sprintf("name expression %q is not valid: %s", in.Entry, problem))}
	}
	var named, defined []kernel
	for _, k := range u.kernels {
		if e.matches(k, u.usingNS) {
			named = append(named, k)
			if k.defined {
				defined = append(defined, k)
			}
		}
	}
	if len(named) == 0 {
		return []Diag{u.undefined(e, in, lx)}
	}
	if len(defined) == 0 {
		k := named[0]
		return []Diag{lx.diag(k.file, k.line, fmt.Sprintf("kernel %q is declared but never defined: the entry needs its body", k.name))}
	}
	var first []Diag
	for i, k := range defined {
		d := u.match(k, e, in, lx)
		if len(d) == 0 {
			return nil
		}
		if i == 0 {
			first = d
		}
	}
	return first
}

// undefined explains an entry that names no kernel.
func (u unit) undefined(e nameExpr, in Input, lx *lexer) Diag {
	last := e.name[strings.LastIndex(e.name, ":")+1:]
	for _, k := range u.kernels {
		if k.name == last || strings.HasSuffix(k.name, "::"+last) {
			return lx.diag(in.File, 1, fmt.Sprintf("identifier %q is undefined: the kernel on line %d of %s is %q", e.name, k.line, k.file, k.name))
		}
	}
	if t, ok := u.idents[last]; ok {
		return lx.diag(t.file, t.line, fmt.Sprintf("%q is not a __global__ function: the entry must name a kernel", e.name))
	}
	return lx.diag(in.File, 1, fmt.Sprintf("identifier %q is undefined: no __global__ function of that name is in the source", e.name))
}

// match checks one kernel's template and parameters against the entry.
func (u unit) match(k kernel, e nameExpr, in Input, lx *lexer) []Diag {
	at := func(file string, line int, format string, args ...any) []Diag {
		return []Diag{lx.diag(file, line, fmt.Sprintf(format, args...))}
	}
	inst, problem := u.instantiate(k, e)
	if problem != "" {
		return at(k.file, k.line, "%s", problem)
	}
	if len(k.params) != len(in.Params) {
		return at(k.file, k.line, "kernel %q takes %d parameters, but Params declares %d", k.name, len(k.params), len(in.Params))
	}
	var out []Diag
	for i, p := range k.params {
		if len(p) == 0 {
			return at(k.file, k.line, "expected a declaration of parameter %d of %q", i+1, k.name)
		}
		kind := Scalar
		if u.isPointer(p, inst) {
			kind = Pointer
		}
		if want := in.Params[i]; want != Any && want != kind {
			out = append(out, at(p[0].file, p[0].line, "parameter %d of %q (%s) is %s, but Params[%d] is %s",
				i+1, k.name, spell(p), kind, i, want)...)
		}
	}
	return out
}

// instantiate binds the entry's template arguments to k's template
// parameters, marking those given a pointer type.
func (u unit) instantiate(k kernel, e nameExpr) ([]tparam, string) {
	switch {
	case !e.hasArgs:
		for _, p := range k.tmpl {
			if !p.deflt && !p.pack {
				return nil, fmt.Sprintf("%q is a function template: the entry must name an instance, such as %s<float>", k.name, e.name)
			}
		}
		return nil, ""
	case !k.template:
		return nil, fmt.Sprintf("%q is not a template, but the entry gives template arguments", k.name)
	case len(k.tmpl) == 0:
		return nil, "" // an explicit specialization: its arguments are its own
	}
	pack, required := false, 0
	for _, p := range k.tmpl {
		pack = pack || p.pack
		if !p.deflt && !p.pack {
			required++
		}
	}
	if len(e.args) < required || len(e.args) > len(k.tmpl) && !pack {
		return nil, fmt.Sprintf("no instance of function template %q matches: it takes %d template arguments, the entry gives %d",
			k.name, len(k.tmpl), len(e.args))
	}
	inst := append([]tparam(nil), k.tmpl...)
	for i, a := range e.args {
		if i < len(inst) && inst[i].typ && !inst[i].pack {
			inst[i].pointer = u.isPointer(newLexer(nil, nil).lexText(a, "", 0), nil)
		}
	}
	return inst, ""
}

// spell writes a parameter's tokens back as text.
func spell(p []token) string {
	var sb strings.Builder
	for i, t := range p {
		if i > 0 {
			prev := p[i-1]
			if (prev.kind != tokPunct || prev.is(">")) && (t.kind != tokPunct || t.is("*") || t.is("&")) {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(t.text)
	}
	return sb.String()
}
