package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/sim/internal/kernelscan"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

// Compile is the simulated device's stand-in for NVRTC; core.Backend.Compile
// calls it on this device in place of the compiler. Nothing is compiled
// (the program's Go twin runs instead), but the source is refused where
// NVRTC would refuse it, as far as a declaration scanner can tell:
//
//   - each name expression in req.NameExpressions ("saxpy", "ns::k",
//     "scale<float>") must name a __global__ function that the source, or a
//     header of req.Headers it includes, defines; a template instance must
//     fit its template's parameters;
//   - that kernel's parameters must match params in count and kind: a
//     pointer (or array) for driver.ParamBuffer, anything else for a scalar
//     type;
//   - braces, brackets and parentheses must balance, comments and literals
//     must be closed, ignoring what comments, string and character literals
//     and skipped #if branches hold.
//
// Object-like macros, -D and --define-macro options included, are expanded
// first. Types beyond pointer or scalar, statements, expressions and
// identifiers used in bodies are not checked: such code compiles here and
// fails only on a GPU.
//
// A refusal is an *nvrtcapi.CompileError with NVRTC_ERROR_COMPILATION whose
// Log is in NVRTC's form ("saxpy.cu(3): error: ..." with the line quoted,
// then "1 error detected in the compilation of ..."), the error the real
// compiler returns. On success, Output.Lowered holds each entry's stand-in
// symbol and Output.Image declares it with ".entry", so ModuleLoad and
// ModuleFunction accept it. Config.CompileDelay makes each call take that
// long first, as a real compilation takes milliseconds to seconds.
func (d *Device) Compile(req nvrtcapi.Request, params []driver.ParamType) (nvrtcapi.Output, error) {
	d.mu.Lock()
	delay := d.cfg.CompileDelay
	d.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	name := req.Name
	if name == "" {
		name = "program.cu"
	}
	in := kernelscan.Input{File: name, Source: req.Source, Headers: map[string]string{}, Defines: defines(req.Options),
		Params: make([]kernelscan.Kind, len(params))}
	for _, h := range req.Headers {
		in.Headers[h.Name] = h.Source
	}
	for i, p := range params {
		in.Params[i] = kindOf(p)
	}
	if len(req.NameExpressions) == 0 {
		return nvrtcapi.Output{}, fmt.Errorf("sim: Compile of %s names no entry: %w", name, nvrtcapi.NVRTC_ERROR_INVALID_INPUT)
	}
	var diags []kernelscan.Diag
	out := nvrtcapi.Output{Lowered: make([]string, len(req.NameExpressions))}
	image := "// " + name + ": CUDA C++ run by its Go twin on the simulated device\n"
	for i, entry := range req.NameExpressions {
		in.Entry = entry
		diags = append(diags, kernelscan.Check(in)...)
		out.Lowered[i] = symbolOf(entry)
		image += ".entry " + out.Lowered[i] + " {}\n"
	}
	if len(diags) > 0 {
		return nvrtcapi.Output{}, &nvrtcapi.CompileError{Err: nvrtcapi.NVRTC_ERROR_COMPILATION, Log: compileLog(name, diags)}
	}
	out.Image = []byte(image)
	return out, nil
}

// kindOf maps a parameter type to what a declaration shows of it.
func kindOf(p driver.ParamType) kernelscan.Kind {
	switch {
	case p == driver.ParamBuffer:
		return kernelscan.Pointer
	case p.Size() > 0:
		return kernelscan.Scalar
	}
	return kernelscan.Any // not a type: the Program's own checks refuse it
}

// defines reads the -D options of an NVRTC option list.
func defines(opts []string) map[string]string {
	m := map[string]string{}
	for _, o := range opts {
		var def string
		switch {
		case strings.HasPrefix(o, "--define-macro="):
			def = strings.TrimPrefix(o, "--define-macro=")
		case strings.HasPrefix(o, "-D"):
			def = strings.TrimPrefix(o, "-D")
		default:
			continue
		}
		name, val, ok := strings.Cut(def, "=")
		if !ok {
			val = "1"
		}
		if name != "" {
			m[name] = val
		}
	}
	return m
}

// symbolOf turns an entry expression into the stand-in image's symbol.
func symbolOf(entry string) string {
	var sb strings.Builder
	for _, r := range strings.TrimSpace(entry) {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
	}
	return sb.String()
}

// compileLog writes diagnostics as NVRTC writes its log.
func compileLog(name string, diags []kernelscan.Diag) string {
	var sb strings.Builder
	for _, d := range diags {
		fmt.Fprintf(&sb, "%s(%d): error: %s\n", d.File, d.Line, d.Msg)
		if d.Text != "" {
			fmt.Fprintf(&sb, "    %s\n", d.Text)
		}
		sb.WriteByte('\n')
	}
	noun := "errors"
	if len(diags) == 1 {
		noun = "error"
	}
	fmt.Fprintf(&sb, "%d %s detected in the compilation of %q.\n", len(diags), noun, name)
	return sb.String()
}
