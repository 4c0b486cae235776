package kernelscan

import (
	"strings"
)

// tokKind classifies a token.
type tokKind uint8

const (
	tokIdent tokKind = iota + 1
	tokNumber
	tokString // a string literal of any prefix, raw strings included
	tokChar
	tokPunct
)

// token is one token after preprocessing, placed in the file it came from.
type token struct {
	kind tokKind
	text string
	file string
	line int
}

func (t token) is(text string) bool { return t.kind == tokPunct && t.text == text }

// Limits that keep a hostile input cheap.
const (
	maxIncludeDepth = 32
	maxExpanded     = 1 << 18 // tokens macro expansions may add in all; past it macros stay unexpanded
	maxExpandDepth  = 64
)

// macro is one #define. Function-like macros are recorded but never expanded.
type macro struct {
	body     []token
	function bool
}

// lexer turns a file and the headers it includes into tokens.
type lexer struct {
	headers  map[string]string // include files by name
	sources  map[string]string // every file read, for the lines diagnostics quote
	included map[string]bool
	macros   map[string]macro
	toks     []token
	diags    []Diag
	budget   int
}

func newLexer(headers, defines map[string]string) *lexer {
	lx := &lexer{headers: headers, sources: map[string]string{}, included: map[string]bool{},
		macros: map[string]macro{}, budget: maxExpanded}
	for name, val := range defines {
		lx.macros[name] = macro{body: lx.lexText(val, "<command-line>", 1)}
	}
	return lx
}

// errorf records a diagnostic at file:line.
func (lx *lexer) errorf(file string, line int, msg string) {
	lx.diags = append(lx.diags, Diag{File: file, Line: line, Msg: msg, Text: lineOf(lx.sources[file], line)})
}

// lineOf returns line n (from 1) of src, trimmed, or "".
func lineOf(src string, n int) string {
	for i := 1; i < n; i++ {
		k := strings.IndexByte(src, '\n')
		if k < 0 {
			return ""
		}
		src = src[k+1:]
	}
	if k := strings.IndexByte(src, '\n'); k >= 0 {
		src = src[:k]
	}
	return strings.TrimSpace(src)
}

// scanner walks one file's text.
type scanner struct {
	src   string
	file  string
	i     int
	line  int
	bol   bool // only blanks and comments since the start of the line
	conds []cond
	quiet bool // report no lexical errors (macro bodies are checked where used)
}

// cond is one open #if: live when every enclosing branch is read.
type cond struct {
	line       int
	parentLive bool
	active     bool // this branch is read
	taken      bool // some branch of the chain was read
}

func (s *scanner) live() bool {
	if len(s.conds) == 0 {
		return true
	}
	c := s.conds[len(s.conds)-1]
	return c.parentLive && c.active
}

// file reads one file and emits its tokens.
func (lx *lexer) file(name, src string, depth int) {
	lx.sources[name] = src
	s := &scanner{src: src, file: name, line: 1, bol: true}
	for {
		t, ok := lx.next(s, depth)
		if !ok {
			break
		}
		if s.live() {
			lx.emit(t, nil, 0)
		}
	}
	if n := len(s.conds); n > 0 {
		lx.errorf(name, s.conds[n-1].line, "this #if has no #endif")
	}
}

// lexText splits a macro body or define value into tokens placed at line.
func (lx *lexer) lexText(text, file string, line int) []token {
	s := &scanner{src: text, file: file, line: line, quiet: true}
	var out []token
	for {
		t, ok := lx.next(s, maxIncludeDepth)
		if !ok {
			return out
		}
		t.line = line
		out = append(out, t)
	}
}

// emit appends t, expanding an object-like macro (not one being expanded)
// while the expansion budget lasts.
func (lx *lexer) emit(t token, hide []string, depth int) {
	if m, ok := lx.macros[t.text]; ok && t.kind == tokIdent && !m.function && lx.budget > 0 && depth < maxExpandDepth && !contains(hide, t.text) {
		hide = append(hide, t.text)
		lx.budget -= len(m.body)
		for _, b := range m.body {
			b.file, b.line = t.file, t.line
			lx.emit(b, hide, depth+1)
		}
		return
	}
	lx.toks = append(lx.toks, t)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// next returns the next token of s, handling blanks, comments and
// directives on the way; ok is false at the end of the text.
func (lx *lexer) next(s *scanner, depth int) (token, bool) {
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\n':
			s.line++
			s.bol = true
			s.i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			s.i++
		case c == '\\' && s.splice():
		case c == '/' && s.peek(1) == '/':
			s.skipLineComment()
		case c == '/' && s.peek(1) == '*':
			lx.skipBlockComment(s)
		case c == '#' && s.bol && !s.quiet:
			lx.directive(s, depth)
		default:
			s.bol = false
			return lx.token(s), true
		}
	}
	return token{}, false
}

func (s *scanner) peek(k int) byte {
	if s.i+k < len(s.src) {
		return s.src[s.i+k]
	}
	return 0
}

// splice skips a backslash-newline, reporting whether there was one.
func (s *scanner) splice() bool {
	j := s.i + 1
	if j < len(s.src) && s.src[j] == '\r' {
		j++
	}
	if j < len(s.src) && s.src[j] == '\n' {
		s.i = j + 1
		s.line++
		return true
	}
	return false
}

func (s *scanner) skipLineComment() {
	for s.i < len(s.src) && s.src[s.i] != '\n' {
		if s.src[s.i] == '\\' && s.splice() {
			continue
		}
		s.i++
	}
}

func (lx *lexer) skipBlockComment(s *scanner) {
	start := s.line
	end := strings.Index(s.src[s.i+2:], "*/")
	if end < 0 {
		s.line += strings.Count(s.src[s.i:], "\n")
		s.i = len(s.src)
		if !s.quiet && s.live() {
			lx.errorf(s.file, start, "this comment is never closed (no \"*/\")")
		}
		return
	}
	s.line += strings.Count(s.src[s.i:s.i+2+end], "\n")
	s.i += end + 4
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// token reads one token starting at s.i.
func (lx *lexer) token(s *scanner) token {
	start, c := s.i, s.src[s.i]
	t := token{file: s.file, line: s.line}
	switch {
	case isIdentStart(c):
		for s.i < len(s.src) && isIdentChar(s.src[s.i]) {
			s.i++
		}
		word := s.src[start:s.i]
		if q := s.peek(0); q == '"' || q == '\'' {
			if strings.HasSuffix(word, "R") && q == '"' && isPrefix(word[:len(word)-1]) {
				lx.rawString(s)
				t.kind, t.text = tokString, s.src[start:s.i]
				return t
			}
			if isPrefix(word) {
				lx.quoted(s, q)
				t.kind, t.text = tokString, s.src[start:s.i]
				if q == '\'' {
					t.kind = tokChar
				}
				return t
			}
		}
		t.kind, t.text = tokIdent, word
	case c >= '0' && c <= '9' || c == '.' && s.peek(1) >= '0' && s.peek(1) <= '9':
		s.number()
		t.kind, t.text = tokNumber, s.src[start:s.i]
	case c == '"' || c == '\'':
		lx.quoted(s, c)
		t.kind, t.text = tokString, s.src[start:s.i]
		if c == '\'' {
			t.kind = tokChar
		}
	default:
		s.i++
		switch {
		case c == ':' && s.peek(0) == ':':
			s.i++
		case c == '.' && s.peek(0) == '.' && s.peek(1) == '.':
			s.i += 2
		}
		t.kind, t.text = tokPunct, s.src[start:s.i]
	}
	return t
}

// isPrefix reports whether word is an encoding prefix of a literal.
func isPrefix(word string) bool {
	switch word {
	case "", "u8", "u", "U", "L":
		return true
	}
	return false
}

func (s *scanner) number() {
	for s.i < len(s.src) {
		c := s.src[s.i]
		if (c == '+' || c == '-') && s.i > 0 && strings.IndexByte("eEpP", s.src[s.i-1]) >= 0 {
			s.i++
			continue
		}
		if !isIdentChar(c) && c != '.' && c != '\'' {
			return
		}
		s.i++
	}
}

// quoted skips a string or character literal whose opening quote is at s.i.
func (lx *lexer) quoted(s *scanner, q byte) {
	s.i++
	for s.i < len(s.src) {
		switch c := s.src[s.i]; {
		case c == '\\':
			if !s.splice() {
				s.i += 2
			}
		case c == q:
			s.i++
			return
		case c == '\n':
			lx.unclosed(s, q)
			return
		default:
			s.i++
		}
	}
	s.i = len(s.src)
	lx.unclosed(s, q)
}

func (lx *lexer) unclosed(s *scanner, q byte) {
	if s.quiet || !s.live() {
		return
	}
	what := "string literal"
	if q == '\'' {
		what = "character literal"
	}
	lx.errorf(s.file, s.line, "missing closing quote: this "+what+" is never closed")
}

// rawString skips R"delim( ... )delim" whose quote is at s.i.
func (lx *lexer) rawString(s *scanner) {
	start := s.line
	open := strings.IndexByte(s.src[s.i:], '(')
	if open < 0 || open > 17 {
		s.i++
		lx.unclosed(s, '"')
		return
	}
	delim := ")" + s.src[s.i+1:s.i+open] + "\""
	end := strings.Index(s.src[s.i+open:], delim)
	if end < 0 {
		s.line += strings.Count(s.src[s.i:], "\n")
		s.i = len(s.src)
		if !s.quiet && s.live() {
			lx.errorf(s.file, start, "missing closing quote: this raw string literal is never closed")
		}
		return
	}
	stop := s.i + open + end + len(delim)
	s.line += strings.Count(s.src[s.i:stop], "\n")
	s.i = stop
}
