package kernelscan

import (
	"strings"
)

// directive reads the preprocessor line whose '#' is at s.i and applies it:
// conditionals always, the rest only in a live branch.
func (lx *lexer) directive(s *scanner, depth int) {
	line := s.line
	text := s.logicalLine()
	word, rest := cutWord(strings.TrimSpace(text[1:]))
	switch word {
	case "if", "ifdef", "ifndef":
		live := s.live()
		on := lx.condition(word, rest)
		s.conds = append(s.conds, cond{line: line, parentLive: live, active: on, taken: on})
		return
	case "elif", "elifdef", "elifndef", "else", "endif":
		lx.chain(s, word, rest, line)
		return
	}
	if !s.live() {
		return
	}
	switch word {
	case "define":
		name, body := cutIdent(rest)
		if name == "" {
			lx.errorf(s.file, line, "expected an identifier after #define")
			return
		}
		if strings.HasPrefix(body, "(") {
			lx.macros[name] = macro{function: true}
			return
		}
		lx.macros[name] = macro{body: lx.lexText(body, s.file, line)}
	case "undef":
		name, _ := cutIdent(rest)
		delete(lx.macros, name)
	case "include":
		lx.include(rest, depth)
	case "error":
		lx.errorf(s.file, line, "#error directive: "+strings.TrimSpace(rest))
	}
}

// chain applies #elif, #else and #endif to the innermost #if.
func (lx *lexer) chain(s *scanner, word, rest string, line int) {
	n := len(s.conds)
	if n == 0 {
		if s.live() {
			lx.errorf(s.file, line, "#"+word+" without #if")
		}
		return
	}
	c := &s.conds[n-1]
	switch word {
	case "endif":
		s.conds = s.conds[:n-1]
	case "else":
		c.active, c.taken = !c.taken, true
	default:
		on := !c.taken && lx.condition(strings.Replace(word, "el", "", 1), rest)
		c.active, c.taken = on, c.taken || on
	}
}

// condition guesses whether a conditional's branch is read: literal 0 and
// 1 and whether a macro is defined decide; anything else, and a name
// starting with "__" (the compiler may predefine it), reads the branch.
func (lx *lexer) condition(word, rest string) bool {
	known := func(name string) (defined, ok bool) {
		if _, d := lx.macros[name]; d {
			return true, true
		}
		return false, isIdent(name) && !strings.HasPrefix(name, "__")
	}
	switch name, _ := cutIdent(rest); word {
	case "ifdef":
		d, ok := known(name)
		return d || !ok
	case "ifndef":
		d, ok := known(name)
		return !d || !ok
	}
	expr := strings.Join(strings.Fields(rest), "")
	neg := strings.HasPrefix(expr, "!")
	expr = strings.TrimPrefix(expr, "!")
	switch {
	case expr == "0" || expr == "1":
		return (expr == "1") != neg
	case strings.HasPrefix(expr, "defined"):
		if d, ok := known(strings.Trim(strings.TrimPrefix(expr, "defined"), "()")); ok {
			return d != neg
		}
	}
	return true
}

// include reads a header given as a string, once.
func (lx *lexer) include(rest string, depth int) {
	rest = strings.TrimSpace(rest)
	if len(rest) < 2 {
		return
	}
	end := byte('"')
	if rest[0] == '<' {
		end = '>'
	} else if rest[0] != '"' {
		return
	}
	k := strings.IndexByte(rest[1:], end)
	if k < 0 {
		return
	}
	name := rest[1 : 1+k]
	src, ok := lx.headers[name]
	if !ok || lx.included[name] || depth >= maxIncludeDepth {
		return
	}
	lx.included[name] = true
	lx.file(name, src, depth+1)
}

// logicalLine consumes a directive up to its unspliced newline and returns
// its text with comments blanked and splices joined.
func (s *scanner) logicalLine() string {
	var sb strings.Builder
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\n':
			return sb.String()
		case c == '\\' && s.splice():
		case c == '/' && s.peek(1) == '/':
			s.skipLineComment()
		case c == '/' && s.peek(1) == '*':
			end := strings.Index(s.src[s.i+2:], "*/")
			if end < 0 {
				end = len(s.src) - s.i - 2
			}
			stop := min(s.i+end+4, len(s.src))
			s.line += strings.Count(s.src[s.i:stop], "\n")
			s.i = stop
			sb.WriteByte(' ')
		case c == '"' || c == '\'':
			start := s.i
			s.skipQuoted(c)
			sb.WriteString(s.src[start:s.i])
		default:
			sb.WriteByte(c)
			s.i++
		}
	}
	return sb.String()
}

// skipQuoted skips a literal inside a directive, stopping at a newline.
func (s *scanner) skipQuoted(q byte) {
	s.i++
	for s.i < len(s.src) && s.src[s.i] != '\n' {
		c := s.src[s.i]
		s.i++
		if c == q {
			return
		}
		if c == '\\' && s.i < len(s.src) && s.src[s.i] != '\n' {
			s.i++
		}
	}
}

// cutWord splits off the leading identifier-like word.
func cutWord(s string) (word, rest string) {
	i := 0
	for i < len(s) && isIdentChar(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// cutIdent splits off a leading identifier after blanks.
func cutIdent(s string) (name, rest string) {
	s = strings.TrimLeft(s, " \t")
	if s == "" || !isIdentStart(s[0]) {
		return "", s
	}
	return cutWord(s)
}

func isIdent(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}
