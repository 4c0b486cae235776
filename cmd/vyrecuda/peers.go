package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/driver"
)

// openDrivers opens a driver on each of the first n CUDA devices, for the
// peer matrix; on failure it closes those it opened. It is a variable so
// tests can show the matrix of a simulated machine.
var openDrivers = func(n int) ([]core.Driver, error) {
	drvs := make([]core.Driver, 0, n)
	for i := 0; i < n; i++ {
		d, err := core.NewCUDADriver(i)
		if err != nil {
			return nil, errors.Join(err, closeDrivers(drvs))
		}
		drvs = append(drvs, d)
	}
	return drvs, nil
}

// closeDrivers closes every driver that can be closed.
func closeDrivers(drvs []core.Driver) error {
	var err error
	for _, d := range drvs {
		if c, ok := d.(io.Closer); ok {
			err = errors.Join(err, c.Close())
		}
	}
	return err
}

// peerLegend explains the cells of the peer matrix.
const peerLegend = `  yes: direct peer access; +atomics: native atomics over the link; rN: performance rank (0 the fastest)
  the CUDA driver does not say whether a link is NVLink or PCIe (nvidia-smi topo -m does)
`

// printPeerMatrix prints, for n devices, how each device (row) reaches each
// other device's memory (column), as the driver's PeerAttributes report
// it. It prints nothing for fewer than two devices; a failure to ask is
// printed, not returned: info describes what it can.
func printPeerMatrix(w io.Writer, n int) {
	if n < 2 {
		return
	}
	drvs, err := openDrivers(n)
	if err != nil {
		fmt.Fprintf(w, "peer links: unavailable: %v\n", err)
		return
	}
	defer func() {
		if err := closeDrivers(drvs); err != nil {
			fmt.Fprintf(w, "peer links: closing the drivers failed: %v\n", err)
		}
	}()
	cells, err := peerCells(drvs)
	if err != nil {
		fmt.Fprintf(w, "peer links: unavailable: %v\n", err)
		return
	}
	fmt.Fprintln(w, "peer links (row device to column device's memory):")
	writeMatrix(w, cells)
	fmt.Fprint(w, peerLegend)
}

// peerCells asks every ordered pair of drivers for its link and returns the
// matrix's cells; the diagonal is "self".
func peerCells(drvs []core.Driver) ([][]string, error) {
	reps := make([]driver.PeerAttributeReporter, len(drvs))
	for i, d := range drvs {
		r, ok := d.(driver.PeerAttributeReporter)
		if !ok {
			return nil, fmt.Errorf("the driver of device %d (%T) does not report peer links", i, d)
		}
		reps[i] = r
	}
	cells := make([][]string, len(drvs))
	for i, r := range reps {
		cells[i] = make([]string, len(drvs))
		for j, p := range drvs {
			if i == j {
				cells[i][j] = "self"
				continue
			}
			a, err := r.PeerAttributes(p)
			if err != nil {
				return nil, fmt.Errorf("device %d to %d: %w", i, j, err)
			}
			cells[i][j] = formatPeerAttributes(a)
		}
	}
	return cells, nil
}

// formatPeerAttributes is one cell: "no", or "yes", "+atomics" where the
// link has them, and the link's performance rank.
func formatPeerAttributes(a driver.PeerAttributes) string {
	if !a.Access {
		return "no"
	}
	s := "yes"
	if a.NativeAtomics {
		s += " +atomics"
	}
	return fmt.Sprintf("%s r%d", s, a.PerformanceRank)
}

// writeMatrix prints cells as a table with a header row and column of
// device ordinals, every column as wide as its widest cell.
func writeMatrix(w io.Writer, cells [][]string) {
	width := len(fmt.Sprintf("[%d]", len(cells)-1))
	for _, row := range cells {
		for _, c := range row {
			width = max(width, len(c))
		}
	}
	label := len(fmt.Sprintf("[%d]", len(cells)-1))
	var b strings.Builder
	fmt.Fprintf(&b, "  %*s", label, "")
	for j := range cells {
		fmt.Fprintf(&b, "  %-*s", width, fmt.Sprintf("[%d]", j))
	}
	fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	for i, row := range cells {
		b.Reset()
		fmt.Fprintf(&b, "  %*s", label, fmt.Sprintf("[%d]", i))
		for _, c := range row {
			fmt.Fprintf(&b, "  %-*s", width, c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
