package accounting

// ResidentTotalBudget returns 9/10 of total device memory, rounded down, as
// the byte budget for resident buffers. It is computed as 9*(total/10) +
// 9*(total%10)/10, which equals floor(9*total/10) without a 128-bit
// intermediate and cannot overflow for any total.
func ResidentTotalBudget(total uint64) uint64 {
	return total/10*9 + total%10*9/10
}

// ResidentLiveBudget returns the budget a new resident allocation is checked
// against: the bytes already resident plus the smaller of the headroom left
// in the total budget and 9/10 of the device's live free memory. When
// resident already meets or exceeds the total budget it returns resident, so
// no new allocation fits but owned buffers are never counted as over budget.
// The sum cannot overflow: it is at most ResidentTotalBudget(total).
func ResidentLiveBudget(total, liveFree, resident uint64) uint64 {
	budget := ResidentTotalBudget(total)
	if resident >= budget {
		return resident
	}
	return resident + min(budget-resident, ResidentTotalBudget(liveFree))
}

// OptimizerPoolBudget returns 1/32 of device memory, the byte cap of the
// optimizer dispatcher's free pool (and, separately, of its static cache).
func OptimizerPoolBudget(total uint64) uint64 {
	return total / 32
}
