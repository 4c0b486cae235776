// Package xferplan decides how one host<->device transfer call moves its
// bytes. Given what a call asks for (direction, number of device copies
// after fusion, bytes, whether the host side is already page-locked) and a
// Tuning, Choose returns a Plan:
//
//   - Direct: the host memory is page-locked, so the DMA reads or writes it
//     with no staging copy.
//   - PerCopy: the bytes are copied into one pinned staging block and moved
//     by one driver copy per device copy.
//   - Packed: many small copies travel as one packed block plus a table, with
//     a scatter (upload) or gather (readback) kernel putting each piece in
//     place; a large packed upload moves in Parts DMAs, each queued as soon
//     as its part is packed, so packing later parts overlaps the DMAs of
//     earlier ones; a drainable packed readback (Request.Drainable) moves
//     in Parts DMAs too, each part copied out as soon as it has landed.
//   - Staged: one large copy moves in Chunks chunks through Blocks pinned
//     staging blocks in rotation. Workers goroutines share one copy job
//     for the whole call (so their start-up is paid once), each chunk's DMA
//     is queued on one stream as soon as its copy ends, and the host copy
//     of later chunks overlaps the DMAs of earlier ones.
//
// Every choice comes from one cost model (Model) that predicts the time of
// each candidate from constants measured on the reference machine (an H100
// host with 16 cores); the cheapest candidate wins. Nothing else in the
// library holds transfer thresholds.
//
// The package is pure computation: it performs no I/O, holds no state and
// never panics, whatever the input; nonsense inputs (negative sizes, zero
// copies) give a PerCopy plan of nothing to do, which callers never ask for.
package xferplan
