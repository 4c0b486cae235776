package kernelscan

import "strings"

// kernel is one __global__ function declaration or definition.
type kernel struct {
	name     string    // qualified: "ns::k"
	bare     string    // the same without anonymous and inline namespaces
	file     string    // where its name is
	line     int       //
	params   [][]token // each parameter's tokens, default argument included
	tmpl     []tparam  // template parameters; nil for a plain function
	template bool      // declared under a template<...> header
	defined  bool      // has a body
}

// tparam is one template parameter.
type tparam struct {
	name    string
	typ     bool // a type parameter (typename/class)
	pack    bool
	deflt   bool // has a default argument
	pointer bool // only for the scan of an instance: its argument is a pointer type
}

// unit is what the scan of a translation unit found.
type unit struct {
	kernels  []kernel
	pointers map[string]bool  // typedef and using aliases of pointer types
	idents   map[string]token // the first occurrence of every identifier
	usingNS  bool             // a using-directive makes unqualified names reach into namespaces
}

// scope is one open brace.
type scope struct {
	name   string // a namespace's name ("" when anonymous or not a namespace)
	ns     bool
	inline bool
}

// attributes that may stand between __global__ and a kernel's name, each
// followed by a parenthesized argument list.
var attributes = map[string]bool{"__launch_bounds__": true, "__attribute__": true, "__declspec": true,
	"alignas": true, "__align__": true, "__cluster_dims__": true, "__maxnreg__": true}

// declarations finds kernels, pointer aliases and identifiers in balanced toks.
func declarations(toks []token) unit {
	u := unit{pointers: map[string]bool{}, idents: map[string]token{}}
	var scopes []scope
	var pending []tparam // the template header of the declaration being read
	templated := false
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind == tokIdent {
			if _, seen := u.idents[t.text]; !seen {
				u.idents[t.text] = t
			}
		}
		switch {
		case t.is(";"):
			pending, templated = nil, false
		case t.is("{"):
			scopes = append(scopes, scope{})
			pending, templated = nil, false
		case t.is("}"):
			if len(scopes) > 0 {
				scopes = scopes[:len(scopes)-1]
			}
			pending, templated = nil, false
		case t.kind != tokIdent:
		case t.text == "namespace":
			var s scope
			s, i = namespaceScope(toks, i)
			if s.ns {
				s.inline = i > 0 && prevIs(toks, i, "inline")
				scopes = append(scopes, s)
			}
		case t.text == "using":
			if next(toks, i+1).text == "namespace" {
				u.usingNS = true
			}
			i = u.alias(toks, i, true)
		case t.text == "typedef":
			i = u.alias(toks, i, false)
		case t.text == "template" && next(toks, i+1).is("<"):
			pending, i = templateParams(toks, i+1)
			templated = true
		case t.text == "__global__":
			var k kernel
			var ok bool
			k, i, ok = kernelDecl(toks, i, scopes)
			if ok {
				k.tmpl, k.template = pending, templated
				u.kernels = append(u.kernels, k)
			}
		}
	}
	return u
}

func next(toks []token, i int) token {
	if i >= 0 && i < len(toks) {
		return toks[i]
	}
	return token{}
}

func prevIs(toks []token, i int, text string) bool {
	for j := i - 1; j >= 0; j-- {
		if toks[j].text == "namespace" {
			p := next(toks, j-1)
			return p.kind == tokIdent && p.text == text
		}
	}
	return false
}

// namespaceScope reads "namespace a::b {" from toks[i]; it returns the scope
// (ns false for an alias or something unexpected) and the index of the
// brace, or of the last token read.
func namespaceScope(toks []token, i int) (scope, int) {
	var parts []string
	for j := i + 1; j < len(toks); j++ {
		t := toks[j]
		switch {
		case t.is("{"):
			return scope{name: strings.Join(parts, "::"), ns: true}, j
		case t.kind == tokIdent && t.text != "inline":
			parts = append(parts, t.text)
		case t.is("::"):
		default:
			return scope{}, j - 1
		}
	}
	return scope{}, len(toks) - 1
}

// skipGroup returns the index of the closer that matches the opener at i.
func skipGroup(toks []token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch toks[j].text {
		case "(", "[", "{":
			if toks[j].kind == tokPunct {
				depth++
			}
		case ")", "]", "}":
			if toks[j].kind == tokPunct {
				depth--
				if depth == 0 {
					return j
				}
			}
		}
	}
	return len(toks) - 1
}

// angleEnd returns the index of the '>' that closes the '<' at i, skipping
// bracketed groups; len(toks) when there is none.
func angleEnd(toks []token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		t := toks[j]
		switch {
		case t.is("<"):
			depth++
		case t.is(">"):
			depth--
			if depth == 0 {
				return j
			}
		case t.is("(") || t.is("["):
			j = skipGroup(toks, j)
		case t.is(";") || t.is("{") || t.is("}"):
			return len(toks)
		}
	}
	return len(toks)
}

// splitTop splits toks at commas outside brackets and template arguments.
func splitTop(toks []token) [][]token {
	var out [][]token
	start, angle := 0, 0
	for j := 0; j < len(toks); j++ {
		t := toks[j]
		switch {
		case t.is("(") || t.is("[") || t.is("{"):
			j = skipGroup(toks, j)
		case t.is("<") && j > 0 && toks[j-1].kind == tokIdent:
			angle++
		case t.is(">") && angle > 0:
			angle--
		case t.is(",") && angle == 0:
			out = append(out, toks[start:j])
			start = j + 1
		}
	}
	return append(out, toks[start:])
}

// templateParams reads "<...>" at toks[i]; it returns the parameters and
// the index of the closing '>'.
func templateParams(toks []token, i int) ([]tparam, int) {
	end := angleEnd(toks, i)
	if end >= len(toks) {
		return nil, i
	}
	out := []tparam{}
	if end == i+1 {
		return out, end
	}
	for _, p := range splitTop(toks[i+1 : end]) {
		if len(p) == 0 {
			continue
		}
		tp := tparam{typ: p[0].text == "typename" || p[0].text == "class" || p[0].text == "template"}
		for j, t := range p {
			if t.is("=") {
				tp.deflt = true
				p = p[:j]
				break
			}
			if t.is("...") {
				tp.pack = true
			}
		}
		if len(p) > 1 && p[len(p)-1].kind == tokIdent {
			tp.name = p[len(p)-1].text
		}
		out = append(out, tp)
	}
	return out, end
}

// alias reads a typedef or a using alias from toks[i] to its ';' and
// records the name when it names a pointer type; it returns the index of
// the last token read.
func (u *unit) alias(toks []token, i int, using bool) int {
	end := i + 1
	for end < len(toks) && !toks[end].is(";") && !toks[end].is("{") && !toks[end].is("}") {
		if toks[end].is("(") || toks[end].is("[") {
			end = skipGroup(toks, end)
		}
		end++
	}
	if end >= len(toks) || !toks[end].is(";") {
		return end - 1
	}
	decl := toks[i+1 : end]
	name := ""
	switch {
	case using && len(decl) >= 2 && decl[0].kind == tokIdent && decl[1].is("="):
		name, decl = decl[0].text, decl[2:]
	case using:
		return end
	default:
		name = aliasName(decl)
	}
	if name != "" && u.isPointer(decl, nil) {
		u.pointers[name] = true
	}
	return end
}

// aliasName finds the name a typedef declares: the identifier after "(*"
// for a function pointer, else the last identifier outside brackets.
func aliasName(decl []token) string {
	for j := 0; j+2 < len(decl); j++ {
		if decl[j].is("(") && decl[j+1].is("*") && decl[j+2].kind == tokIdent {
			return decl[j+2].text
		}
	}
	name := ""
	for j := 0; j < len(decl); j++ {
		switch t := decl[j]; {
		case t.is("(") || t.is("["):
			j = skipGroup(decl, j)
		case t.kind == tokIdent:
			name = t.text
		}
	}
	return name
}

// isPointer reports whether a parameter's or alias's tokens (a default
// argument excluded) declare a pointer: a '*' or '[' outside template
// arguments, or a type named by a pointer alias or by a template parameter
// whose argument is a pointer.
func (u *unit) isPointer(decl []token, tmpl []tparam) bool {
	angle := 0
	for j, t := range decl {
		switch {
		case t.is("=") && angle == 0:
			return false
		case t.is("<") && j > 0 && decl[j-1].kind == tokIdent:
			angle++
		case t.is(">") && angle > 0:
			angle--
		case angle > 0:
		case t.is("*") || t.is("["):
			return true
		case t.kind == tokIdent:
			if u.pointers[t.text] {
				return true
			}
			for _, p := range tmpl {
				if p.pointer && p.name == t.text {
					return true
				}
			}
		}
	}
	return false
}

// kernelDecl reads the declaration of the kernel whose __global__ is at
// toks[i]; it returns the kernel and the index of the last token read.
func kernelDecl(toks []token, i int, scopes []scope) (kernel, int, bool) {
	var quals []string
	j := i + 1
	for ; j < len(toks); j++ {
		t, n := toks[j], next(toks, j+1)
		switch {
		case t.is(";") || t.is("{") || t.is("}"):
			return kernel{}, j - 1, false
		case t.is("[") && n.is("["):
			j = skipGroup(toks, j)
			continue
		case t.kind != tokIdent:
			quals = nil
			continue
		case attributes[t.text] && n.is("("):
			j = skipGroup(toks, j+1)
			continue
		case n.is("::"):
			quals = append(quals, t.text)
			j++
			continue
		case n.is("<"):
			end := angleEnd(toks, j+1)
			if !next(toks, end+1).is("(") {
				quals, j = nil, end
				continue
			}
		case !n.is("("):
			quals = nil
			continue
		}
		break
	}
	if j >= len(toks) {
		return kernel{}, len(toks) - 1, false
	}
	nameTok := toks[j]
	k := kernel{name: strings.Join(append(quals, nameTok.text), "::"), file: nameTok.file, line: nameTok.line}
	k.bare = qualify(scopes, true, k.name)
	k.name = qualify(scopes, false, k.name)
	open := j + 1
	if toks[open].is("<") {
		open = angleEnd(toks, open) + 1
	}
	if !next(toks, open).is("(") {
		return kernel{}, open - 1, false
	}
	end := skipGroup(toks, open)
	if inner := toks[open+1 : end]; len(inner) > 0 && !(len(inner) == 1 && inner[0].text == "void") {
		k.params = splitTop(inner)
	}
	for m := end + 1; m < len(toks); m++ {
		t := toks[m]
		if t.is("(") || t.is("[") {
			m = skipGroup(toks, m)
			continue
		}
		if t.is("{") {
			k.defined = true
		}
		if t.is("{") || t.is(";") || t.is("}") {
			break
		}
	}
	return k, end, true
}

// qualify prefixes name with the enclosing namespaces; bare leaves out the
// anonymous and inline ones, which a caller's name need not spell.
func qualify(scopes []scope, bare bool, name string) string {
	var parts []string
	for _, s := range scopes {
		if !s.ns || s.name == "" || bare && s.inline {
			continue
		}
		parts = append(parts, s.name)
	}
	return strings.Join(append(parts, name), "::")
}
