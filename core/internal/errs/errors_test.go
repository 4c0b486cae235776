package errs

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestKindNames(t *testing.T) {
	assert.Equal(t, "invalid argument", KindInvalidArgument.String())
	assert.Equal(t, "owned by an optimizer dispatcher", KindOwned.String())
	assert.Equal(t, "unknown kind", Kind(0).String())
	assert.Equal(t, "unknown kind", (KindOwned + 1).String())
}

// TestErrorTextHasOneFix: the message names the op, kind, detail, driver
// code and cause, and carries only its own Fix even when the cause has one.
func TestErrorTextHasOneFix(t *testing.T) {
	cause := errors.New("loader failed. Fix: install the library")
	e := &Error{Op: "Alloc", Kind: KindDriver, Code: cudaapi.CUDA_ERROR_OUT_OF_MEMORY, Detail: "cuMemAlloc failed",
		Fix: "free memory", Err: cause}
	msg := e.Error()
	assert.True(t, strings.HasPrefix(msg, "vyrecuda: Alloc: driver failure: cuMemAlloc failed ("), msg)
	assert.Contains(t, msg, ": loader failed. Fix: free memory")
	assert.Equal(t, 1, strings.Count(msg, "Fix:"), msg)

	nested := &Error{Op: "Upload", Kind: KindInFlight, Detail: "busy", Fix: "wait", Err: e}
	assert.Equal(t, 1, strings.Count(nested.Error(), "Fix:"), "a nested Error contributes its body only")
	assert.Contains(t, nested.Error(), "Alloc: driver failure")

	var nilErr *Error
	assert.Equal(t, "vyrecuda: <nil *core.Error>", nilErr.Error())
	assert.NoError(t, nilErr.Unwrap())
	assert.False(t, nilErr.Is(ErrDriver))
}

func TestSentinelsMatchTheirKindOnly(t *testing.T) {
	e := New("Alloc", KindBudget, "over by 4 bytes", "ask for less")
	assert.ErrorIs(t, e, ErrBudget)
	assert.NotErrorIs(t, e, ErrInvalidArgument)
	wrapped := fmt.Errorf("outer: %w", e)
	assert.ErrorIs(t, wrapped, ErrBudget)
	assert.False(t, e.Is(e), "only a sentinel matches by kind")
	assert.False(t, e.Is(errors.New("budget")))
}

// TestWithOpRenamesACopy: the caller's op replaces an internal one on a
// copy; the original, sentinels, other errors and nil pass unchanged.
func TestWithOpRenamesACopy(t *testing.T) {
	orig := New("stage", KindClosed, "pool closed", "reopen")
	got := WithOp("Upload", orig)
	var e *Error
	require.True(t, errors.As(got, &e))
	assert.Equal(t, "Upload", e.Op)
	assert.Equal(t, "stage", orig.Op, "the original is shared and stays as it was")
	assert.Same(t, orig, WithOp("stage", orig), "an error already under op is returned as it is")
	assert.Equal(t, error(ErrClosed), WithOp("Upload", ErrClosed), "a sentinel keeps its empty Op")
	plain := errors.New("plain")
	assert.Equal(t, plain, WithOp("Upload", plain))
	assert.NoError(t, WithOp("Upload", nil))
}

func TestDriverTakesTheResultAndItsFix(t *testing.T) {
	e := Driver("Alloc", "cuMemAlloc", fmt.Errorf("cuMemAlloc: %w", cudaapi.CUDA_ERROR_OUT_OF_MEMORY))
	assert.Equal(t, KindDriver, e.Kind)
	assert.Equal(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, e.Code)
	assert.Equal(t, fixOutOfMemory, e.Fix)
	assert.Equal(t, "cuMemAlloc failed", e.Detail)

	noCode := Driver("Alloc", "cuMemAlloc", errors.New("no result"))
	assert.Zero(t, noCode.Code)
	assert.Equal(t, fixDriverOther, noCode.Fix)

	// Result codes the older headers lack still get their class's sentence.
	assert.Equal(t, fixUnsupported, driverFix(resultCallRequiresNewerDriver))
	assert.Equal(t, fixHardware, driverFix(resultContained))
	assert.Equal(t, fixHandle, driverFix(resultFunctionNotLoaded))
}

func TestGraphMissingEntryPointIsUnsupported(t *testing.T) {
	for _, err := range []error{cudaapi.ErrMissingSymbol, cudaapi.CUDA_ERROR_NOT_SUPPORTED} {
		e := Graph("Capture", "cuGraphUpload", fmt.Errorf("cuGraphUpload: %w", err))
		assert.Equal(t, KindUnsupported, e.Kind, "%v", err)
		assert.Equal(t, "cuGraphUpload is not available from this driver", e.Detail)
		assert.ErrorIs(t, e, ErrUnsupported)
	}
	e := Graph("Capture", "cuGraphLaunch", cudaapi.CUDA_ERROR_INVALID_VALUE)
	assert.Equal(t, KindDriver, e.Kind)
	assert.Equal(t, cudaapi.CUDA_ERROR_INVALID_VALUE, e.Code)
}

func TestNullSuccess(t *testing.T) {
	e := NullSuccess("Alloc", "cuMemAlloc")
	assert.Equal(t, KindDriver, e.Kind)
	assert.Equal(t, "cuMemAlloc returned success with a null result", e.Detail)
	assert.NotEmpty(t, e.Fix)
	assert.ErrorIs(t, e, ErrDriver)
}

func TestClosedPool(t *testing.T) {
	e := ClosedPool("Upload", "pinned host pool")
	assert.Equal(t, "Upload", e.Op)
	assert.ErrorIs(t, e, ErrClosed)
	assert.Equal(t, "pinned host pool is closed", e.Detail)
	assert.Equal(t, 1, strings.Count(e.Error(), "Fix:"))
}
