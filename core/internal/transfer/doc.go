// Package transfer executes a Backend's transfers between host memory and
// device addresses, once core has validated them and holds their buffers
// in flight. An Engine plans each call (xferplan, under the Backend's
// Tuning, remembered plans), takes its pinned staging (hostmem), device
// staging (devmem) and stream leases (streams), runs its host copies on
// the copy helpers (copyjob), queues its DMAs and the packed kernels'
// launches, fences it, counts it (stats), and, when a failed call's
// streams cannot be drained, hands them with everything their work may
// still use to the launch pool's quarantine. Its paths: Direct copies of
// caller-pinned memory (direct.go), PerCopy (upload.go, read.go), Packed
// blocks with their layout, table and kernels' Go twins (packed.go,
// layout.go, twins.go, packedread.go: readbacks landing in parts), Staged
// chunks through rotating blocks (staged.go), and the transfers of a
// batch queued around its launches (batch.go). Readbacks put their bytes
// in the caller's slots or new slices (drain.go).
//
// It works on device addresses, byte slices, driver handles and
// callbacks: the buffers are the caller's (type E), opaque but for a
// callback that holds them for a quarantine, and the packed kernels come
// from a callback that loads them. It never validates a call, never looks
// up a handle, and must not import core.
package transfer
