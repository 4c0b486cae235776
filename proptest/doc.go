// Package proptest holds the project's property tests and native fuzz
// targets: gopter properties and `go test -fuzz` targets that check the
// accounting and fusion packages against plain models (a map from (handle,
// address) to byte for fusion, math/big for accounting), and state-machine
// properties over the simulated device.
//
// Properties run with a fixed seed so CI is reproducible; set PROPTEST_SEED
// (accounting and fusion) or VYRECUDA_PROP_SEED (the core.Backend state
// machines) to another integer to explore, and VYRECUDA_PROP_LONG=1 for the
// state machines' fuzz-run size (`make fuzz` runs three seeds). A failing
// property prints the command that reproduces it. The package has no non-test
// code and nothing imports it.
package proptest
