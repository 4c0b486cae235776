package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestGroupBackendOutOfRange: an index outside the group, or a nil Group,
// is an ErrInvalidArgument naming the index and the group's size, never a
// silent nil; an index inside it gives that Backend.
func TestGroupBackendOutOfRange(t *testing.T) {
	g, _ := openMachine(t, 2, nil)
	for i, want := range g.Backends() {
		b, err := g.Backend(i)
		require.NoError(t, err)
		assert.Same(t, want, b)
	}
	for _, i := range []int{2, 5, -1} {
		b, err := g.Backend(i)
		assert.Nil(t, b)
		requireKind(t, err, core.ErrInvalidArgument, "Group.Backend", "index ", i, "group of 2")
	}
	var nilGroup *core.Group
	b, err := nilGroup.Backend(0)
	assert.Nil(t, b)
	requireKind(t, err, core.ErrInvalidArgument, "Group is nil")
}
