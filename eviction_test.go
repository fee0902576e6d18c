package expset

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestEvictionReceipt checks that a retried Acquire reports what its first
// run evicted: while the receipt lasts and the member holds the deadline
// that admission gave it (a refresh carries the receipt along); not after
// the receipt lapsed, not after a release and a new admission, and never
// for a quota without WithEvictOldest. The receipt is written only when
// something is evicted, lives in the owner's shard and expires on its own,
// and Drop deletes it.
func TestEvictionReceipt(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 2, WithEvictOldest(), WithEvictionReceiptTTL(time.Minute)))
		qr := must[*Quota](t)(NewQuota(s, 2, WithEvictOldest(), WithRefreshOnReacquire(), WithEvictionReceiptTTL(time.Minute)))
		plain := must[*Quota](t)(NewQuota(s, 2))
		receipt := func(owner, member string) string {
			return s.shards[s.ShardOf(owner)].Receipt + strconv.Itoa(len(owner)) + ":" + owner + member
		}
		for _, m := range []string{"s1", "s2"} {
			must[Decision](t)(q.Acquire(ctx, "acct", m, time.Hour))
			clk.Advance(time.Second)
		}
		if n := b.rdb.Exists(ctx, receipt("acct", "s1"), receipt("acct", "s2")).Val(); n != 0 {
			t.Fatalf("%d receipts written by admissions that evicted nothing", n)
		}
		first := must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour))
		want := Decision{Allowed: true, Count: 2, Limit: 2, Deadline: clk.Now().Add(time.Hour), Evicted: []string{"s1"}}
		if !equalDecision(first, want) {
			t.Fatalf("eviction: %+v, want %+v", first, want)
		}
		key := receipt("acct", "s3")
		if ttl := b.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("receipt %s has TTL %v, want up to 1m", key, ttl)
		}
		clk.Advance(30 * time.Second)
		want.Existing = true
		if d := must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour)); !equalDecision(d, want) {
			t.Fatalf("retry: %+v, want %+v", d, want)
		}
		if d := must[Decision](t)(plain.Acquire(ctx, "acct", "s3", time.Hour)); len(d.Evicted) != 0 || !d.Existing {
			t.Fatalf("retry through a quota without WithEvictOldest: %+v", d)
		}
		// A refresh carries the receipt to the new deadline.
		want.Deadline = clk.Now().Add(2 * time.Hour)
		if d := must[Decision](t)(qr.Acquire(ctx, "acct", "s3", 2*time.Hour)); !equalDecision(d, want) {
			t.Fatalf("retry with refresh: %+v, want %+v", d, want)
		}
		if d := must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour)); !equalDecision(d, want) {
			t.Fatalf("retry after a refresh: %+v, want %+v", d, want)
		}
		// The receipt lapses with the quota's receipt TTL.
		clk.Advance(30 * time.Second)
		want.Evicted = nil
		if d := must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour)); !equalDecision(d, want) {
			t.Fatalf("retry after the receipt lapsed: %+v, want %+v", d, want)
		}

		// Released and admitted again without evicting: a retry reports none.
		if d := must[Decision](t)(q.Acquire(ctx, "acct", "s5", time.Hour)); !reflect.DeepEqual(d.Evicted, []string{"s2"}) {
			t.Fatalf("second eviction: %+v", d)
		}
		if ok := must[bool](t)(q.Release(ctx, "acct", "s5")); !ok {
			t.Fatal("release of s5 found nothing")
		}
		clk.Advance(time.Second)
		if d := must[Decision](t)(q.Acquire(ctx, "acct", "s5", time.Hour)); d.Existing || len(d.Evicted) != 0 {
			t.Fatalf("admission after a release: %+v", d)
		}
		if d := must[Decision](t)(q.Acquire(ctx, "acct", "s5", time.Hour)); !d.Existing || len(d.Evicted) != 0 {
			t.Fatalf("retry of an admission that evicted nothing: %+v", d)
		}

		if k := receipt("acct", "s5"); b.rdb.Exists(ctx, k).Val() != 1 {
			t.Fatalf("receipt %s missing before Drop", k)
		}
		must[int](t)(Drop(ctx, b.rdb, s.Name()))
		if keys := setKeys(t, b.rdb, s.Name()); len(keys) != 0 {
			t.Fatalf("keys left after Drop: %v", keys)
		}
	})
}

// TestEvictionEvents checks that with expiry events every member evicted
// by WithEvictOldest produces one event, with Evicted set, its deadline
// and its payload, and its payload leaves the hash; a retry of the Acquire
// produces none, and a plain expiry's event has Evicted false.
func TestEvictionEvents(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		q := must[*Quota](t)(NewQuota(s, 2, WithEvictOldest()))
		shard := s.ShardOf("acct")
		d1 := must[Decision](t)(q.Acquire(ctx, "acct", "s1", time.Hour, WithPayload([]byte("p1"))))
		clk.Advance(time.Second)
		must[Decision](t)(q.Acquire(ctx, "acct", "s2", time.Hour))
		clk.Advance(time.Second)
		must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour))
		must[Decision](t)(q.Acquire(ctx, "acct", "s3", time.Hour)) // a retry evicts nothing more
		if b.rdb.HExists(ctx, s.shards[shard].Payload+"acct", "s1").Val() {
			t.Fatal("evicted member's payload stayed")
		}
		evs, _ := must2[[]Expiry, string](t)(s.ReadEvents(ctx, shard, "0-0", 100, 0))
		if len(evs) != 1 {
			t.Fatalf("%d events after one eviction: %+v", len(evs), evs)
		}
		e := evs[0]
		if e.Owner != "acct" || e.Member != "s1" || !e.Evicted || !e.Deadline.Equal(d1.Deadline) || string(e.Payload) != "p1" {
			t.Fatalf("eviction event %+v", e)
		}
		// A limit lowered below the live count: one event per evicted member.
		q1 := must[*Quota](t)(NewQuota(s, 2, WithEvictOldest()))
		if d := must[Decision](t)(q1.Acquire(ctx, "acct", "s4", time.Hour, WithLimit(1))); !reflect.DeepEqual(d.Evicted, []string{"s2", "s3"}) {
			t.Fatalf("evict to a lower limit: %+v", d)
		}
		clk.Advance(2 * time.Hour)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		evs, _ = must2[[]Expiry, string](t)(s.ReadEvents(ctx, shard, "0-0", 100, 0))
		var got []string
		for _, e := range evs {
			got = append(got, e.Member+" "+reasonOf(e))
		}
		if want := []string{"s1 evicted", "s2 evicted", "s3 evicted", "s4 expired"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
	})
}

// TestEvictionReceiptTTLOption checks WithEvictionReceiptTTL's range.
func TestEvictionReceiptTTLOption(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	s := must[*Set](t)(Open(context.Background(), redis.NewClient(&redis.Options{Addr: mr.Addr()}), "n"))
	for _, d := range []time.Duration{0, -time.Second, 25 * time.Hour} {
		if _, err := NewQuota(s, 1, WithEvictOldest(), WithEvictionReceiptTTL(d)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithEvictionReceiptTTL(%v): %v, want ErrInvalidArgument", d, err)
		}
	}
	if _, err := NewQuota(s, 1, WithEvictOldest(), WithEvictionReceiptTTL(time.Millisecond)); err != nil {
		t.Error(err)
	}
}

func must2[A, B any](t testing.TB) func(A, B, error) (A, B) {
	return func(a A, b B, err error) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

// TestEvictionEventThroughDeadLetters checks that an eviction event keeps
// its reason through Consume, the dead-letter stream and Kick.
func TestEvictionEventThroughDeadLetters(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents())
		q := must[*Quota](t)(NewQuota(s, 1, WithEvictOldest()))
		must[Decision](t)(q.Acquire(ctx, "acct", "s1", time.Hour))
		clk.Advance(time.Second)
		must[Decision](t)(q.Acquire(ctx, "acct", "s2", time.Hour)) // evicts s1
		var seen recorder
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			seen.add(e)
			return errors.New("no")
		}, append(fastConsume, WithMaxAttempts(1))...)
		waitFor(t, "a dead letter", func() bool {
			d, err := s.DeadLetters(ctx, allShards, 0)
			return err == nil && len(d) == 1
		})
		stop()
		if evs := seen.events(); len(evs) != 1 || evs[0].Member != "s1" || !evs[0].Evicted {
			t.Fatalf("delivered %+v, want s1 evicted", evs)
		}
		dead := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0))
		if !dead[0].Event.Evicted {
			t.Fatalf("dead letter %+v", dead[0])
		}
		if n := must[int](t)(s.Kick(ctx, dead...)); n != 1 {
			t.Fatalf("kicked %d", n)
		}
		evs, _ := must2[[]Expiry, string](t)(s.ReadEvents(ctx, s.ShardOf("acct"), "0-0", 10, 0))
		if len(evs) != 1 || evs[0].Member != "s1" || !evs[0].Evicted {
			t.Fatalf("kicked back as %+v", evs)
		}
	})
}
