package expset

import (
	"context"
	"testing"
	"time"
)

// TestAcquireKeyTTLSkipsShorterDeadlines checks the key TTL that Acquire
// leaves when the new deadline is not the owner's latest (acquire.lua then
// skips its PEXPIRE): the key keeps living to the latest deadline, and a
// later deadline still pushes it further.
func TestAcquireKeyTTLSkipsShorterDeadlines(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 5))
		key := s.OwnerKey("u")
		must[Decision](t)(q.Acquire(ctx, "u", "a", 60*time.Second))
		checkPTTL(t, b, key, 60*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "b", 10*time.Second))
		checkPTTL(t, b, key, 60*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "c", 60*time.Second))
		checkPTTL(t, b, key, 60*time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "d", 90*time.Second))
		checkPTTL(t, b, key, 90*time.Second)
		if n := must[int](t)(s.Count(ctx, "u")); n != 4 {
			t.Fatalf("count %d, want 4", n)
		}
	})
}
