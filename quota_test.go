package expset

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func TestQuotaAdmitsDeniesAndRetries(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 3))
		t0 := clk.Now()

		for i, m := range []string{"o1", "o2", "o3"} {
			d := must[Decision](t)(q.Acquire(ctx, "u", m, time.Duration(10+i)*time.Minute))
			want := Decision{Allowed: true, Count: i + 1, Limit: 3, Deadline: clk.Now().Add(time.Duration(10+i) * time.Minute)}
			if !equalDecision(d, want) {
				t.Fatalf("acquire %s: %+v, want %+v", m, d, want)
			}
			clk.Advance(time.Second)
		}
		// The fourth is denied until the earliest (o1, at t0+10m) expires.
		d := must[Decision](t)(q.Acquire(ctx, "u", "o4", 15*time.Minute))
		want := Decision{Count: 3, Limit: 3, RetryAfter: t0.Add(10 * time.Minute).Sub(clk.Now())}
		if !equalDecision(d, want) {
			t.Fatalf("fourth: %+v, want %+v", d, want)
		}
		// A retried Acquire of a member held is allowed and takes no slot.
		d = must[Decision](t)(q.Acquire(ctx, "u", "o2", time.Hour))
		want = Decision{Allowed: true, Existing: true, Count: 3, Limit: 3, Deadline: t0.Add(time.Second + 11*time.Minute)}
		if !equalDecision(d, want) {
			t.Fatalf("re-acquire: %+v, want %+v", d, want)
		}
		// Paying o2 frees a slot.
		if ok := must[bool](t)(q.Release(ctx, "u", "o2")); !ok {
			t.Fatal("release of a held member reported false")
		}
		if ok := must[bool](t)(q.Release(ctx, "u", "o2")); ok {
			t.Fatal("second release reported true")
		}
		d = must[Decision](t)(q.Acquire(ctx, "u", "o4", 15*time.Minute))
		if !d.Allowed || d.Count != 3 {
			t.Fatalf("after release: %+v", d)
		}
		// o1 expires: its slot frees without anything removing it first.
		clk.Advance(10 * time.Minute)
		d = must[Decision](t)(q.Acquire(ctx, "u", "o5", time.Minute))
		if !d.Allowed || d.Count != 3 || d.Existing {
			t.Fatalf("after expiry: %+v", d)
		}
		if n := b.rdb.ZCard(ctx, s.OwnerKey("u")).Val(); n != 3 {
			t.Fatalf("ZCARD %d: Acquire left an expired member", n)
		}
		// Owners do not share slots.
		if d := must[Decision](t)(q.Acquire(ctx, "other", "o1", time.Minute)); !d.Allowed || d.Count != 1 {
			t.Fatalf("other owner: %+v", d)
		}
	})
}

func equalDecision(a, b Decision) bool {
	return a.Allowed == b.Allowed && a.Existing == b.Existing && a.Count == b.Count &&
		a.Limit == b.Limit && a.Deadline.Equal(b.Deadline) && a.RetryAfter == b.RetryAfter &&
		reflect.DeepEqual(a.Evicted, b.Evicted)
}

func TestQuotaRefreshOnReacquire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 2, WithRefreshOnReacquire()))
		must[Decision](t)(q.Acquire(ctx, "u", "s1", time.Minute))
		clk.Advance(30 * time.Second)
		d := must[Decision](t)(q.Acquire(ctx, "u", "s1", time.Minute))
		if !d.Existing || !d.Deadline.Equal(clk.Now().Add(time.Minute)) || d.Count != 1 {
			t.Fatalf("refresh: %+v", d)
		}
		if got := must[time.Time](t)(s.Deadline(ctx, "u", "s1")); !got.Equal(d.Deadline) {
			t.Fatalf("stored deadline %v, decision %v", got, d.Deadline)
		}
	})
}

func TestQuotaEvictOldest(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithPayloadStorage())
		q := must[*Quota](t)(NewQuota(s, 2, WithEvictOldest()))
		must[Decision](t)(q.Acquire(ctx, "acct", "s1", time.Hour, WithPayload([]byte("p1"))))
		clk.Advance(time.Second)
		must[Decision](t)(q.Acquire(ctx, "acct", "s2", time.Hour))
		clk.Advance(time.Second)
		d := must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour))
		want := Decision{Allowed: true, Count: 2, Limit: 2, Deadline: clk.Now().Add(time.Hour), Evicted: []string{"s1"}}
		if !equalDecision(d, want) {
			t.Fatalf("evict: %+v, want %+v", d, want)
		}
		if ok := must[bool](t)(s.Contains(ctx, "acct", "s1")); ok {
			t.Fatal("evicted member still live")
		}
		if b.rdb.HExists(ctx, s.shards[s.ShardOf("acct")].Payload+"acct", "s1").Val() {
			t.Fatal("evicted member's payload stayed")
		}
		// A per-call limit lower than the live count evicts down to it.
		q1 := must[*Quota](t)(NewQuota(s, 5, WithEvictOldest()))
		d = must[Decision](t)(q1.Acquire(ctx, "acct", "s4", time.Hour, WithLimit(1)))
		want = Decision{Allowed: true, Count: 1, Limit: 1, Deadline: clk.Now().Add(time.Hour), Evicted: []string{"s2", "s3"}}
		if !equalDecision(d, want) {
			t.Fatalf("evict to a lower limit: %+v, want %+v", d, want)
		}
	})
}

func TestQuotaPerCallLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 1))
		must[Decision](t)(q.Acquire(ctx, "vip", "a", time.Minute))
		if d := must[Decision](t)(q.Acquire(ctx, "vip", "b", time.Minute)); d.Allowed {
			t.Fatalf("limit 1 admitted a second: %+v", d)
		}
		clk.Advance(time.Second)
		d := must[Decision](t)(q.Acquire(ctx, "vip", "b", time.Minute, WithLimit(3)))
		if !d.Allowed || d.Limit != 3 || d.Count != 2 {
			t.Fatalf("vip limit: %+v", d)
		}
		// Over the default limit now: a denial waits for two expiries.
		d = must[Decision](t)(q.Acquire(ctx, "vip", "c", time.Minute))
		if d.Allowed || d.Count != 2 || d.RetryAfter != time.Minute {
			t.Fatalf("over limit: %+v, want RetryAfter %v (the second earliest)", d, time.Minute)
		}
	})
}

// TestQuotaLargeLimit covers the paths where the set is larger than the
// script's first read (32 members).
func TestQuotaLargeLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 50))
		for i := 0; i < 50; i++ {
			d := must[Decision](t)(q.Acquire(ctx, "u", "m"+itoa(int64(i)), time.Duration(i+1)*time.Second))
			if !d.Allowed || d.Count != i+1 {
				t.Fatalf("acquire %d: %+v", i, d)
			}
		}
		d := must[Decision](t)(q.Acquire(ctx, "u", "m49", time.Hour))
		if !d.Existing || d.Count != 50 {
			t.Fatalf("re-acquire of the 50th: %+v", d)
		}
		d = must[Decision](t)(q.Acquire(ctx, "u", "x", time.Hour))
		if d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("51st: %+v", d)
		}
		clk.Advance(10 * time.Second)
		d = must[Decision](t)(q.Acquire(ctx, "u", "x", time.Hour))
		if !d.Allowed || d.Count != 41 {
			t.Fatalf("after 10 expired: %+v", d)
		}
	})
}

// TestDropIsBounded covers an owner with more expired members than one
// script drops (1000): reads and counts stay right, events are exact.
func TestDropIsBounded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithShards(1))
		q := must[*Quota](t)(NewQuota(s, 2))
		key := s.OwnerKey("u")
		zs := make([]any, 0, 2*1500)
		t0 := clk.Now().UnixMilli()
		for i := 0; i < 1500; i++ {
			zs = append(zs, t0+int64(i%7), "old"+itoa(int64(i)))
		}
		// Written straight in, as if 1500 had expired unswept.
		args := append([]any{"ZADD", key}, zs...)
		if err := b.rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		b.rdb.ZAdd(ctx, s.shards[0].Due, redisZ(float64(t0), "u"))
		must[time.Time](t)(s.Add(ctx, "u", "live", time.Hour))
		clk.Advance(time.Second)
		d := must[Decision](t)(q.Acquire(ctx, "u", "n1", time.Hour))
		if !d.Allowed || d.Count != 2 {
			t.Fatalf("acquire over 1000+ expired: %+v", d)
		}
		if d := must[Decision](t)(q.Acquire(ctx, "u", "n2", time.Hour)); d.Allowed {
			t.Fatalf("third admitted at limit 2: %+v", d)
		}
		if n := must[int](t)(s.Remove(ctx, "u", "old1499", "live")); n != 1 {
			t.Fatalf("remove counted %d, want 1 (only live)", n)
		}
		if n := b.rdb.XLen(ctx, s.shards[0].Events).Val(); n != 1500 {
			t.Fatalf("%d events, want 1500", n)
		}
	})
}
