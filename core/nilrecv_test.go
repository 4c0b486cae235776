package core_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core"
)

// Every exported method of the package's handle types, called on a nil
// receiver with zero arguments, returns instead of panicking; those that
// return an error return a *core.Error.
func TestNilReceiversNeverPanic(t *testing.T) {
	receivers := []any{
		(*core.Backend)(nil),
		(*core.Pending)(nil),
		(*core.OptimizerDispatcher)(nil),
		(*core.Program)(nil),
		(*core.PinnedBuffer)(nil),
		(*core.Error)(nil),
		(*core.Graph)(nil),
		(*core.Comm)(nil),
		(*core.Group)(nil),
	}
	errType := reflect.TypeFor[error]()
	calls := 0
	for _, r := range receivers {
		v := reflect.ValueOf(r)
		for i := range v.NumMethod() {
			m, name := v.Method(i), v.Type().Method(i).Name
			what := v.Type().String() + "." + name
			args := make([]reflect.Value, m.Type().NumIn())
			for k := range args {
				args[k] = reflect.Zero(m.Type().In(k))
			}
			var out []reflect.Value
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s on a nil receiver panicked: %v", what, p)
					}
				}()
				if m.Type().IsVariadic() {
					out = m.CallSlice(args) // a nil slice of the variadic arguments
				} else {
					out = m.Call(args)
				}
				calls++
			}()
			if len(out) == 0 || v.Type() == reflect.TypeFor[*core.Error]() {
				continue
			}
			last := out[len(out)-1]
			if last.Type() != errType {
				continue
			}
			err, _ := last.Interface().(error)
			if !assert.Error(t, err, "%s on a nil receiver must fail", what) {
				continue
			}
			var ce *core.Error
			if assert.True(t, errors.As(err, &ce), "%s: %T", what, err) {
				assert.True(t, errors.Is(err, core.ErrInvalidArgument) || errors.Is(err, core.ErrClosed), "%s: %v", what, err)
				assert.NotEmpty(t, ce.Op, what)
				assert.NotEmpty(t, ce.Fix, what)
			}
		}
	}
	assert.Greater(t, calls, 50, "the table reached every method")
}
