// Package accounting owns the checked integer arithmetic that every byte
// count, range, device address and handle id in vyrecuda goes through, the
// atomic checked Counter used for budgets and id allocation, and the budget
// and bucket formulas shared by the core's store and pools.
//
// Nothing here wraps or saturates: a result that cannot be represented is an
// error wrapping one of ErrOverflow, ErrUnderflow, ErrOutOfRange or
// ErrNegative, and its message carries the numbers involved. Saturation would
// hide accounting bugs as silently wrong budgets; an error surfaces them.
//
// The package must not import anything from the rest of the module: fusion
// and core build on it.
package accounting
