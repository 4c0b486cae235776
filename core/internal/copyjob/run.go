package copyjob

import "time"

// ntCopyBytes is the length from which Go's memmove (amd64) switches to
// non-temporal stores, which write the destination without first reading
// it into the cache; copy tasks of large copies are kept at least this
// long.
const ntCopyBytes = 1 << 20

// Start shares j with w-1 helpers: the shared ones when free, else
// goroutines of its own. It reports whether j was shared; the caller then
// passes that to Stop, which unshares it.
func Start(j *Job, w int) bool {
	if w <= 1 {
		return false
	}
	if helpers.share(j, w-1) {
		return true
	}
	for range w - 1 {
		go j.WorkAll()
	}
	return false
}

// RunTasks runs f(0..n-1), each once, on up to w goroutines including the
// calling one, and returns when every f has returned; shared helpers then
// poll for a next job for linger (<= 0: they park at once). Helpers that
// have not claimed a task by then claim none later, so nothing f uses is
// touched after RunTasks returns.
func RunTasks(n, w int, linger time.Duration, f func(i int)) {
	if w <= 1 || n <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	j := NewJob(n, linger, false, f)
	if helpers.run(j, min(w, n)-1) {
		return
	}
	for range min(w, n) - 1 {
		go j.Work()
	}
	j.Work()
	j.Wait()
}

// CopyTask is the bytes per task of a parallel copy of n bytes by w
// workers: about TasksPerWorker tasks each, but at least 1 MiB (from which
// Go's memmove uses non-temporal stores) when that still gives every
// worker one, a multiple of 64 so tasks cover whole cache lines.
func CopyTask(n, w int) int {
	task := n / (w * TasksPerWorker)
	if task < ntCopyBytes {
		task = min(ntCopyBytes, n/w)
	}
	return max((task+63)&^63, 64)
}

// ParallelCopy copies src into dst (of equal length) with cp, in tasks on
// up to w goroutines, the calling one among them; helpers then linger as
// RunTasks says. cp must finish its own work (fence its non-temporal
// stores) before it returns: a task counts as done when cp returns.
func ParallelCopy(dst, src []byte, w int, linger time.Duration, cp func(dst, src []byte)) {
	n := len(src)
	if w <= 1 || n < 2 {
		cp(dst, src)
		return
	}
	task := CopyTask(n, w)
	RunTasks((n+task-1)/task, w, linger, func(i int) {
		lo := i * task
		hi := min(lo+task, n)
		cp(dst[lo:hi], src[lo:hi])
	})
}

// ForParts splits items [0, n) into contiguous parts of about equal weight,
// about TasksPerWorker per worker, and runs f on each on up to w
// goroutines, the calling one among them. start(i) is the cumulative weight
// before item i (non-decreasing, start(0) == 0) and total the weight of all
// items. Helpers then linger as RunTasks says.
func ForParts(n, w int, linger time.Duration, start func(i int) int, total int, f func(lo, hi int)) {
	if w <= 1 || n < 2 {
		f(0, n)
		return
	}
	parts := min(n, w*TasksPerWorker)
	bounds := make([]int, 1, parts+1)
	lo := 0
	for k := 1; k <= parts && lo < n; k++ {
		hi := n
		if k < parts {
			// The first item whose start reaches this part's share of the weight.
			goal := int(uint64(total) * uint64(k) / uint64(parts))
			a, z := lo+1, n
			for a < z {
				m := int(uint(a+z) >> 1)
				if start(m) < goal {
					a = m + 1
				} else {
					z = m
				}
			}
			hi = a
		}
		bounds = append(bounds, hi)
		lo = hi
	}
	RunTasks(len(bounds)-1, w, linger, func(k int) { f(bounds[k], bounds[k+1]) })
}
