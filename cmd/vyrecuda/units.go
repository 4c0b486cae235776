package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// byteUnits are the suffixes sizeFlag accepts, longest first so "KiB" is
// matched before "B".
var byteUnits = []struct {
	suffix string
	shift  uint
}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}

// sizeFlag is a byte count flag that accepts 4096, 4KiB, 256MiB or 1GiB.
type sizeFlag int

func (s *sizeFlag) String() string { return formatBytes(uint64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// sizeListFlag is a comma-separated list of sizes, such as 16KiB,2MiB; a
// value replaces the whole list.
type sizeListFlag []int

func (s *sizeListFlag) String() string {
	parts := make([]string, len(*s))
	for i, n := range *s {
		parts[i] = strings.ReplaceAll(formatBytes(uint64(n)), " ", "")
		if strings.Contains(parts[i], ".") { // not a whole unit: plain bytes parse back
			parts[i] = strconv.Itoa(n)
		}
	}
	return strings.Join(parts, ",")
}

func (s *sizeListFlag) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := parseSize(f)
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	*s = out
	return nil
}

// parseSize parses a positive byte count with an optional binary suffix.
func parseSize(v string) (int, error) {
	num, shift := strings.TrimSpace(v), uint(0)
	for _, u := range byteUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, shift = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("want a positive size such as 4096, 4KiB or 256MiB, got %q", v)
	}
	if n > math.MaxInt>>shift {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return int(n << shift), nil
}

// formatBytes prints a byte count with the largest binary unit that keeps it
// at least 1 (exact counts print without decimals: 4 KiB, 256 MiB).
func formatBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// formatDuration prints a duration with three significant digits in us or ms.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g us", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.4g ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.4g s", d.Seconds())
}
