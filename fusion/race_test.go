//go:build race

package fusion

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts that rely on the scratch pool are only exact without it.
const raceEnabled = true
