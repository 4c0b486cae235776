//go:build !cgo

package ncclapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWithoutCgoEverythingIsLibraryNotFound(t *testing.T) {
	assert.ErrorIs(t, Loaded(), ErrLibraryNotFound)
	assert.ErrorIs(t, GroupStart(), ErrLibraryNotFound)
	_, err := CommInitRank(1, UniqueId{}, 0)
	assert.ErrorIs(t, err, ErrLibraryNotFound)
}
