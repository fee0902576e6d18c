package bench

import "testing"

// BenchmarkSweep is the place for the sweeper's benchmark: expired members
// reclaimed per second and server time per reclaimed member, beside the
// alternative of letting key TTLs and ZREMRANGEBYSCORE on write do it, with
// its row in README.md's table (marked TODO(sweeper) there too).
//
// TODO(sweeper): the Sweeper is being built on another branch; fill this in
// when it lands.
func BenchmarkSweep(b *testing.B) {
	b.Skip("TODO(sweeper): no Sweeper on this branch yet")
}
