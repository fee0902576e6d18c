package expset

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPlainAcquireOnServerClock checks the common call's own script
// (acquire_plain.lua: a set without flags on the server's clock) where its
// decision takes other paths than the short cases of
// TestLeanCallsOnServerClock: expired members dropped before an admission
// and skipped by a denial, a denial's retry past expired members, the reply
// forms of a count of 64 or more, and the calls it leaves to acquire.lua (a
// wait line with a free slot, more expired members than one call drops).
func TestPlainAcquireOnServerClock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := openServerClock(t, b, WithShards(1))
		key := s.OwnerKey("u")
		live := time.Now().Add(time.Hour).UnixMilli()
		seed := func(owner string, zs ...redis.Z) {
			t.Helper()
			if err := b.rdb.ZAdd(ctx, s.OwnerKey(owner), zs...).Err(); err != nil {
				t.Fatal(err)
			}
			b.rdb.PExpire(ctx, s.OwnerKey(owner), 2*time.Hour)
		}
		old := func(i int) redis.Z { return redis.Z{Score: float64(1000 + i), Member: "old" + strconv.Itoa(i)} }

		// Two expired and two live at limit 3: admitted, the expired dropped.
		seed("u", old(0), old(1), redis.Z{Score: float64(live), Member: "a"}, redis.Z{Score: float64(live + 1), Member: "b"})
		q3 := must[*Quota](t)(NewQuota(s, 3))
		if d := must[Decision](t)(q3.Acquire(ctx, "u", "old0", 2*time.Hour)); !d.Allowed || d.Existing || d.Count != 3 {
			t.Fatalf("acquire of an expired member's name: %+v, want admitted anew, count 3", d)
		}
		if got := b.rdb.ZRange(ctx, key, 0, -1).Val(); len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "old0" {
			t.Fatalf("members %v, want [a b old0]", got)
		}

		// At the limit behind expired members: denied until the earliest
		// live deadline, the expired left for a later write.
		seed("v", old(0), old(1), old(2), redis.Z{Score: float64(live), Member: "a"}, redis.Z{Score: float64(live + 5000), Member: "b"})
		q2 := must[*Quota](t)(NewQuota(s, 2))
		d := must[Decision](t)(q2.Acquire(ctx, "v", "c", time.Minute))
		if d.Allowed || d.Count != 2 || d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
			t.Fatalf("denied behind expired members: %+v, want count 2, RetryAfter about an hour", d)
		}
		if d := must[Decision](t)(q2.Acquire(ctx, "v", "b", time.Minute)); !d.Existing || d.Count != 2 || d.Deadline.UnixMilli() != live+5000 {
			t.Fatalf("retry behind expired members: %+v", d)
		}

		// A count of 64 or more: the denial's wide integer, and the text
		// of an admission and a retry; from a limit of 1000, the retry's
		// one count of the live.
		zs := []redis.Z{old(0)}
		for i := range 100 {
			zs = append(zs, redis.Z{Score: float64(live + int64(i)), Member: "m" + strconv.Itoa(i)})
		}
		seed("w", zs...)
		q100 := must[*Quota](t)(NewQuota(s, 100))
		if d := must[Decision](t)(q100.Acquire(ctx, "w", "x", time.Minute)); d.Allowed || d.Count != 100 || d.RetryAfter <= 59*time.Minute {
			t.Fatalf("denied at 100: %+v", d)
		}
		if d := must[Decision](t)(q100.Acquire(ctx, "w", "m99", time.Minute)); !d.Existing || d.Count != 100 || d.Deadline.UnixMilli() != live+99 {
			t.Fatalf("retry at 100: %+v", d)
		}
		q1000 := must[*Quota](t)(NewQuota(s, 1000))
		if d := must[Decision](t)(q1000.Acquire(ctx, "w", "m7", time.Minute)); !d.Existing || d.Count != 100 || d.Deadline.UnixMilli() != live+7 {
			t.Fatalf("retry at limit 1000: %+v", d)
		}
		if d := must[Decision](t)(q1000.Acquire(ctx, "w", "x", time.Minute)); !d.Allowed || d.Existing || d.Count != 101 {
			t.Fatalf("admission at 1000: %+v", d)
		}
		if n := b.rdb.ZScore(ctx, s.OwnerKey("w"), "old0").Err(); n != redis.Nil {
			t.Fatalf("expired member left after an admission: %v", n)
		}

		// More expired members than one call drops: acquire.lua takes the
		// call, dropping them in bounded steps.
		zs = zs[:0]
		for i := range 1500 {
			zs = append(zs, old(i))
		}
		seed("big", zs...)
		if d := must[Decision](t)(q2.Acquire(ctx, "big", "n", time.Hour)); !d.Allowed || d.Count != 1 {
			t.Fatalf("acquire over 1500 expired: %+v", d)
		}
		if n := must[int](t)(s.Count(ctx, "big")); n != 1 {
			t.Fatalf("count %d, want 1", n)
		}
		if n := b.rdb.ZCard(ctx, s.OwnerKey("big")).Val(); n != 501 {
			t.Fatalf("%d members left, want 501: the new one and the 500 expired past one call's 1000", n)
		}

		// A wait line with a live ticket holds the free slot: the call goes
		// to acquire.lua, which respects the line.
		sk := s.shards[0]
		b.rdb.ZAdd(ctx, sk.Line+"line", redis.Z{Score: 1, Member: "ticket"})
		b.rdb.ZAdd(ctx, sk.Leases+"line", redis.Z{Score: float64(live), Member: "ticket"})
		q1 := must[*Quota](t)(NewQuota(s, 1))
		if d := must[Decision](t)(q1.Acquire(ctx, "line", "n", time.Hour)); d.Allowed {
			t.Fatalf("admitted past a waiter: %+v", d)
		}
		b.rdb.Del(ctx, sk.Line+"line", sk.Leases+"line")
		if d := must[Decision](t)(q1.Acquire(ctx, "line", "n", time.Hour)); !d.Allowed || d.Count != 1 {
			t.Fatalf("acquire with the line gone: %+v", d)
		}
	})
}

// TestPlainAcquireWithEvents checks acquire_plain.lua on a set with expiry
// events (server clock): the owner filed in the due index at or before its
// earliest deadline, the sweeper woken when the owner becomes the index's
// head (a poll of a minute would not find it in time), and an owner with
// an expired member handed to acquire.lua, which writes its event.
func TestPlainAcquireWithEvents(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := openServerClock(t, b, WithShards(1), WithExpiryEvents())
		due := s.shards[0].Due
		q := must[*Quota](t)(NewQuota(s, 3))
		got := deliveries(t, s, WithPollInterval(time.Minute))
		late := must[Decision](t)(q.Acquire(ctx, "u", "late", time.Hour))
		if !late.Allowed || b.rdb.ZScore(ctx, due, "u").Val() != float64(late.Deadline.UnixMilli()) {
			t.Fatalf("first member: %+v, index at %v", late, b.rdb.ZScore(ctx, due, "u").Val())
		}
		later := must[Decision](t)(q.Acquire(ctx, "u", "later", 2*time.Hour))
		if !later.Allowed || later.Count != 2 || b.rdb.ZScore(ctx, due, "u").Val() != float64(late.Deadline.UnixMilli()) {
			t.Fatalf("a later member moved the index: %+v", later)
		}
		time.Sleep(200 * time.Millisecond) // both loops asleep
		if d := must[Decision](t)(q.Acquire(ctx, "u", "soon", 50*time.Millisecond)); !d.Allowed || d.Count != 3 {
			t.Fatalf("soon: %+v", d)
		}
		waitFor(t, "soon handled", func() bool { return got()["soon"] })

		if err := b.rdb.ZAdd(ctx, s.OwnerKey("v"), redis.Z{Score: 1000, Member: "old"}).Err(); err != nil {
			t.Fatal(err)
		}
		if d := must[Decision](t)(q.Acquire(ctx, "v", "new", time.Hour)); !d.Allowed || d.Count != 1 {
			t.Fatalf("acquire over an expired member: %+v", d)
		}
		waitFor(t, "the expired member's event handled", func() bool { return got()["old"] })
	})
}

// TestPlainAcquireEvicting checks acquire_plain.lua for a quota
// WithEvictOldest (server clock, one call where Hooks.OnCall counts the
// acquire calls): at the limit the earliest live member is evicted, behind
// expired members too (dropped with it), and a retry reports it while the
// receipt lasts, for members of any bytes; the receipt is a string that
// acquire.lua reads and refreshes (WithRefreshOnReacquire goes there)
// and writes for acquire_plain.lua to read. It hands to acquire.lua a
// receipt of the list form acquire.lua wrote before, and an eviction on a
// set with events (whose events acquire.lua writes), which each take two
// calls and decide the same.
func TestPlainAcquireEvicting(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var calls atomic.Int64
		hooks := WithHooks(Hooks{OnCall: func(_ context.Context, ci CallInfo) {
			if ci.Op == "acquire" {
				calls.Add(1)
			}
		}})
		s := openServerClock(t, b, WithShards(1), hooks)
		evicting := func(limit int, opts ...QuotaOption) *Quota {
			return must[*Quota](t)(NewQuota(s, limit, append([]QuotaOption{WithEvictOldest(), WithEvictionReceiptTTL(time.Minute)}, opts...)...))
		}
		acquire := func(q *Quota, owner, member string, wantCalls int64, want Decision) Decision {
			t.Helper()
			calls.Store(0)
			d, err := q.Acquire(ctx, owner, member, time.Hour)
			if err != nil || d.Allowed != want.Allowed || d.Existing != want.Existing || d.Count != want.Count ||
				!slices.Equal(d.Evicted, want.Evicted) || calls.Load() != wantCalls {
				t.Fatalf("Acquire(%q, %q): %+v, %v in %d calls; want %+v in %d", owner, member, d, err, calls.Load(), want, wantCalls)
			}
			return d
		}
		receipt := func(owner, member string) string {
			return s.shards[0].Receipt + strconv.Itoa(len(owner)) + ":" + owner + member
		}
		q2 := evicting(2)

		// At the limit: the earliest evicted, in one call; a retry reports it.
		acquire(q2, "u", "a", 1, Decision{Allowed: true, Count: 1})
		acquire(q2, "u", "b", 1, Decision{Allowed: true, Count: 2})
		first := acquire(q2, "u", "c", 1, Decision{Allowed: true, Count: 2, Evicted: []string{"a"}})
		if typ, ttl := b.rdb.Type(ctx, receipt("u", "c")).Val(), b.rdb.PTTL(ctx, receipt("u", "c")).Val(); typ != "string" || ttl <= 0 || ttl > time.Minute {
			t.Fatalf("receipt: %s with TTL %v, want a string living up to 1m", typ, ttl)
		}
		again := acquire(q2, "u", "c", 1, Decision{Allowed: true, Existing: true, Count: 2, Evicted: []string{"a"}})
		if !again.Deadline.Equal(first.Deadline) {
			t.Fatalf("retry's deadline %v, want %v", again.Deadline, first.Deadline)
		}
		if got := b.rdb.ZRange(ctx, s.OwnerKey("u"), 0, -1).Val(); !slices.Equal(got, []string{"b", "c"}) {
			t.Fatalf("members %v, want [b c]", got)
		}

		// Members of any bytes, in the receipt's lengths and separators.
		odd := []string{"a b:3", "12:x y", "\x00\xff :", " "}
		q1 := evicting(1)
		acquire(q1, "w", odd[0], 1, Decision{Allowed: true, Count: 1})
		for i := 1; i < len(odd); i++ {
			acquire(q1, "w", odd[i], 1, Decision{Allowed: true, Count: 1, Evicted: odd[i-1 : i]})
			acquire(q1, "w", odd[i], 1, Decision{Allowed: true, Existing: true, Count: 1, Evicted: odd[i-1 : i]})
		}

		// Behind expired members: they go with the evicted, in one call.
		live := time.Now().Add(time.Hour).UnixMilli()
		seed := func(owner string, zs ...redis.Z) {
			t.Helper()
			if err := b.rdb.ZAdd(ctx, s.OwnerKey(owner), zs...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		old := redis.Z{Score: 1000, Member: "old"}
		seed("v", old, redis.Z{Score: float64(live), Member: "a"}, redis.Z{Score: float64(live + 1), Member: "b"})
		acquire(q2, "v", "c", 1, Decision{Allowed: true, Count: 2, Evicted: []string{"a"}})
		seed("x", old, redis.Z{Score: float64(live), Member: "a"}, redis.Z{Score: float64(live + 1), Member: "b"},
			redis.Z{Score: float64(live + 2), Member: "c"})
		acquire(q2, "x", "d", 1, Decision{Allowed: true, Count: 2, Evicted: []string{"a", "b"}})
		for _, o := range []string{"v", "x"} {
			if got := b.rdb.ZRange(ctx, s.OwnerKey(o), 0, -1).Val(); len(got) != 2 || slices.Contains(got, "old") {
				t.Fatalf("owner %s holds %v, want 2 live members", o, got)
			}
		}

		// acquire.lua reads and refreshes the string; it writes one too.
		refresh := evicting(2, WithRefreshOnReacquire())
		// (A refresh of two hours: a deadline later than the first's on any clock.)
		d, err := refresh.Acquire(ctx, "u", "c", 2*time.Hour)
		if err != nil || !d.Existing || !slices.Equal(d.Evicted, []string{"a"}) || !d.Deadline.After(first.Deadline.Add(59*time.Minute)) {
			t.Fatalf("refresh: %+v, %v; want c held two hours on, a evicted", d, err)
		}
		acquire(q2, "u", "c", 1, Decision{Allowed: true, Existing: true, Count: 2, Evicted: []string{"a"}})
		acquire(refresh, "u", "e", 1, Decision{Allowed: true, Count: 2, Evicted: []string{"b"}})
		acquire(q2, "u", "e", 1, Decision{Allowed: true, Existing: true, Count: 2, Evicted: []string{"b"}})

		// A receipt of the list form: acquire.lua reads it.
		seed("l", redis.Z{Score: float64(live), Member: "m"})
		if err := b.rdb.RPush(ctx, receipt("l", "m"), live, live+60_000, "gone 1", "gone:2").Err(); err != nil {
			t.Fatal(err)
		}
		acquire(q2, "l", "m", 2, Decision{Allowed: true, Existing: true, Count: 1, Evicted: []string{"gone 1", "gone:2"}})

		// With events: an admission in one call; an eviction, whose event
		// acquire.lua writes, in two.
		es := openServerClock(t, b, WithShards(1), WithExpiryEvents(), hooks)
		qe := must[*Quota](t)(NewQuota(es, 1, WithEvictOldest()))
		acquire(qe, "u", "a", 1, Decision{Allowed: true, Count: 1})
		acquire(qe, "u", "b", 2, Decision{Allowed: true, Count: 1, Evicted: []string{"a"}})
		acquire(qe, "u", "b", 1, Decision{Allowed: true, Existing: true, Count: 1, Evicted: []string{"a"}})
		evs, _, err := es.ReadEvents(ctx, 0, "0-0", 10, 0)
		if err != nil || len(evs) != 1 || evs[0].Member != "a" || !evs[0].Evicted {
			t.Fatalf("events: %+v, %v; want a's eviction", evs, err)
		}
	})
}
