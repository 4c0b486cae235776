// Package fusion owns copy fusion: turning a batch of per-buffer host<->device
// copy requests into the fewest copies that move the same bytes.
//
// FuseUploads keeps ordered-overwrite semantics: applying its result gives
// byte-for-byte the memory that applying the requests one after another
// gives. FuseReadbacks merges the requested source ranges into their union
// and gives every request a view into the fused copies, in request order.
// FusePeerCopies merges consecutive device-to-device requests that continue
// each other on both sides, keeping their order.
//
// Upload and readback fusion never merge across handles, even when two buffers' addresses
// touch: a copy must stay inside the allocation it names. It is pure
// computation over the caller's slices: it performs no I/O, takes no locks,
// and returns an error wrapping an accounting sentinel (never a panic) for
// any input whose addresses or lengths cannot be represented.
package fusion
