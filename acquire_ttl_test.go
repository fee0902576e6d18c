package expset

import (
	"context"
	"testing"
	"time"
)

// TestAcquireKeyTTLSkipsShorterDeadlines checks the key TTL that Acquire
// leaves when the new deadline is not the owner's latest, or falls in the
// TTL bucket of the latest (acquire.lua then skips its PEXPIRE): the key
// keeps living to the end of the latest deadline's bucket, and a deadline
// in a later bucket still pushes it further.
func TestAcquireKeyTTLSkipsShorterDeadlines(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 5))
		key := s.OwnerKey("u")
		must[Decision](t)(q.Acquire(ctx, "u", "a", 60*time.Second))
		checkKeyTTL(t, b, key, 60*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "b", 10*time.Second))
		checkKeyTTL(t, b, key, 60*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "c", 60*time.Second))
		checkKeyTTL(t, b, key, 60*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "d", 90*time.Second))
		checkKeyTTL(t, b, key, 90*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "e", 91*time.Second))
		checkKeyTTL(t, b, key, 91*time.Second)
		if n := must[int](t)(s.Count(ctx, "u")); n != 5 {
			t.Fatalf("count %d, want 5", n)
		}
	})
}
