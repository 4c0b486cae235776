package core

import "github.com/vyre-go/vyrecuda/core/internal/errs"

// The error type, its kinds and sentinels live in core/internal/errs and are
// aliased in aliases.go; these forwarders keep core's call sites short.

// newError builds an *Error; detail should carry the numbers involved.
func newError(op string, kind Kind, detail, fix string) *Error {
	return errs.New(op, kind, detail, fix)
}

// driverError wraps an error returned by a Driver call, with the Fix
// sentence for its class of driver result.
func driverError(op, call string, err error) *Error { return errs.Driver(op, call, err) }

// nullSuccess reports a driver call that returned success with a null
// handle or pointer, which the Backend never accepts.
func nullSuccess(op, call string) *Error { return errs.NullSuccess(op, call) }

// withOp returns err renamed to op when it is an *Error naming another
// operation, so internal calls' errors reach the caller under its call's
// name.
func withOp(op string, err error) error { return errs.WithOp(op, err) }
