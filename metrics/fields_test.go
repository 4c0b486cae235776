package metrics

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestEveryFieldIsExported fails when a field is added to MemoryStats or
// Telemetry without a metric: it sets each field to a value of its own and
// checks that exactly one metric reads it, under a name that follows the
// Prometheus rules for its kind.
func TestEveryFieldIsExported(t *testing.T) {
	check := func(typ reflect.Type, table []metric, read func(metric, reflect.Value) uint64) {
		v := reflect.New(typ).Elem()
		for i := range typ.NumField() {
			require.Equal(t, reflect.Uint64, typ.Field(i).Type.Kind(), "%s.%s: the collector reads uint64 fields", typ.Name(), typ.Field(i).Name)
			v.Field(i).SetUint(uint64(1000 + i))
		}
		byField := map[string]metric{}
		for _, m := range table {
			_, dup := byField[m.field]
			require.False(t, dup, "field %s exported twice", m.field)
			byField[m.field] = m
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			m, ok := byField[f.Name]
			if !assert.True(t, ok, "%s.%s has no metric: add it to the table in metrics.go", typ.Name(), f.Name) {
				continue
			}
			assert.Equal(t, uint64(1000+i), read(m, v), "%s.%s: the metric %s reads another field", typ.Name(), f.Name, m.name)
			assert.Equal(t, m.counter, strings.HasSuffix(m.name, "_total"), "%s: counters, and only counters, end in _total", m.name)
		}
		assert.Len(t, table, typ.NumField(), "every metric of %s names a field", typ.Name())
	}
	check(reflect.TypeFor[core.MemoryStats](), memoryMetrics, func(m metric, v reflect.Value) uint64 { return m.mem(v.Interface().(core.MemoryStats)) })
	check(reflect.TypeFor[core.Telemetry](), telemetryMetrics, func(m metric, v reflect.Value) uint64 { return m.tel(v.Interface().(core.Telemetry)) })

	for _, m := range allMetrics() {
		if strings.Contains(strings.ToLower(m.help), "bytes") {
			assert.Contains(t, m.name, "_bytes", "%s counts bytes: its name says so", m.name)
		}
	}
}
