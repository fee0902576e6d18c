package expset

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// openServerClock opens a set on the server's clock (no WithClock): its
// Acquire, Add and Extend send the short argument lists of the lean scripts.
func openServerClock(t *testing.T, b backend, opts ...OpenOption) *Set {
	t.Helper()
	return must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), opts...))
}

// TestLeanCallsOnServerClock checks every Acquire outcome, Add, Extend and
// Remove through the short argument lists (a set with no flags on the
// server's clock): allowed, held (Existing, same deadline), denied with
// RetryAfter up to the earliest deadline, and the one-integer reply's
// count and deadline.
func TestLeanCallsOnServerClock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := openServerClock(t, b)
		q := must[*Quota](t)(NewQuota(s, 2))
		first := must[Decision](t)(q.Acquire(ctx, "u", "a", time.Minute))
		if !first.Allowed || first.Existing || first.Count != 1 || first.Limit != 2 || first.Deadline.IsZero() {
			t.Fatalf("first: %+v", first)
		}
		again := must[Decision](t)(q.Acquire(ctx, "u", "a", time.Hour))
		if !again.Allowed || !again.Existing || again.Count != 1 || !again.Deadline.Equal(first.Deadline) {
			t.Fatalf("retry: %+v, want Existing at %v", again, first.Deadline)
		}
		must[Decision](t)(q.Acquire(ctx, "u", "b", 2*time.Minute))
		denied := must[Decision](t)(q.Acquire(ctx, "u", "c", time.Minute))
		if denied.Allowed || denied.Count != 2 || denied.RetryAfter <= 0 || denied.RetryAfter > time.Minute {
			t.Fatalf("denied: %+v, want RetryAfter up to a minute", denied)
		}
		d := must[time.Time](t)(s.Add(ctx, "u", "c", 3*time.Minute))
		if got := must[time.Time](t)(s.Deadline(ctx, "u", "c")); !got.Equal(d) {
			t.Fatalf("Add: deadline %v, read %v", d, got)
		}
		e := must[time.Time](t)(s.Extend(ctx, "u", "a", 5*time.Minute))
		if !e.After(first.Deadline) {
			t.Fatalf("Extend: %v, not after %v", e, first.Deadline)
		}
		checkKeyTTL(t, b, s.OwnerKey("u"), 5*time.Minute)
		if _, err := s.Extend(ctx, "u", "none", time.Minute); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Extend of an absent member: %v", err)
		}
		if n := must[int](t)(s.Remove(ctx, "u", "a", "b", "c", "none")); n != 3 {
			t.Fatalf("Remove: %d, want 3", n)
		}
		if n := b.rdb.Exists(ctx, s.OwnerKey("u")).Val(); n != 0 {
			t.Fatalf("owner key left after its last member was removed")
		}
	})
}

// TestAcquireReplyForms checks the decisions across the reply's two forms:
// one integer while the count stays below 64, the table from 64 on (and
// when a deadline would not fit), with the same meaning.
func TestAcquireReplyForms(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 70))
		for i := range 70 {
			d := must[Decision](t)(q.Acquire(ctx, "u", "m"+strconv.Itoa(i), time.Minute+time.Duration(i)*time.Millisecond))
			want := Decision{Allowed: true, Count: i + 1, Limit: 70, Deadline: clk.Now().Add(time.Minute + time.Duration(i)*time.Millisecond)}
			if !equalDecision(d, want) {
				t.Fatalf("acquire #%d: %+v, want %+v", i, d, want)
			}
		}
		for _, i := range []int{0, 63, 69} {
			want := Decision{Allowed: true, Existing: true, Count: 70, Limit: 70, Deadline: clk.Now().Add(time.Minute + time.Duration(i)*time.Millisecond)}
			if d := must[Decision](t)(q.Acquire(ctx, "u", "m"+strconv.Itoa(i), time.Hour)); !equalDecision(d, want) {
				t.Fatalf("retry of m%d: %+v, want %+v", i, d, want)
			}
		}
		want := Decision{Count: 70, Limit: 70, RetryAfter: time.Minute}
		if d := must[Decision](t)(q.Acquire(ctx, "u", "x", time.Minute)); !equalDecision(d, want) {
			t.Fatalf("denied: %+v, want %+v", d, want)
		}
		// A deadline from 2^45 ms (year 3085) on comes in the table.
		far := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithClock(func() time.Time { return time.UnixMilli(1<<45 - 10) })))
		fq := must[*Quota](t)(NewQuota(far, 1))
		want = Decision{Allowed: true, Count: 1, Limit: 1, Deadline: time.UnixMilli(1<<45 + 90)}
		if d := must[Decision](t)(fq.Acquire(ctx, "u", "a", 100*time.Millisecond)); !equalDecision(d, want) {
			t.Fatalf("far deadline: %+v, want %+v", d, want)
		}
	})
}

// TestAcquireManyOneShard checks a batch whose requests share one shard, so
// one script call: a failing request (a key of another type) fails alone,
// requests for one owner run in order, and a call that has moved as many
// members as one call may stops, its other requests going in the next call.
func TestAcquireManyOneShard(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var mu sync.Mutex
		calls := 0
		s, _ := newTestSet(t, b, WithShards(1), WithHooks(Hooks{OnCall: func(_ context.Context, c CallInfo) {
			if c.Op == "acquire-many" {
				mu.Lock()
				calls++
				mu.Unlock()
			}
		}}))
		q := must[*Quota](t)(NewQuota(s, 2))
		b.rdb.Set(ctx, s.OwnerKey("bad"), "not a zset", 0)
		reqs := []AcquireRequest{
			{Owner: "u", Member: "a", TTL: time.Minute},
			{Owner: "bad", Member: "m", TTL: time.Minute},
			{Owner: "u", Member: "b", TTL: time.Minute},
			{Owner: "u", Member: "c", TTL: time.Minute},
			{Owner: "u", Member: "a", TTL: time.Minute},
		}
		got, err := q.AcquireMany(ctx, reqs)
		var be *BatchError
		if !errors.As(err, &be) || be.Errs[1] == nil || be.Errs[0] != nil || be.Errs[2] != nil || be.Errs[3] != nil || be.Errs[4] != nil {
			t.Fatalf("want a BatchError for request #1 only, got %v", err)
		}
		if !strings.Contains(be.Errs[1].Error(), "WRONGTYPE") {
			t.Fatalf("request #1: %v, want the server's WRONGTYPE", be.Errs[1])
		}
		if !got[0].Allowed || got[1].Allowed || !got[2].Allowed || got[3].Allowed || !got[4].Existing {
			t.Fatalf("decisions %+v", got)
		}
		if calls != 1 {
			t.Fatalf("%d script calls for one shard's 5 requests, want 1", calls)
		}

		// An owner with more expired members than one call drops: the
		// call stops after its request.
		big := s.OwnerKey("big")
		for i := 0; i < maxBatch+5; i += 500 {
			args := []any{"ZADD", big}
			for j := i; j < min(i+500, maxBatch+5); j++ {
				args = append(args, j+1, "old"+strconv.Itoa(j))
			}
			must[any](t)(b.rdb.Do(ctx, args...).Result())
		}
		calls = 0
		got = must[[]Decision](t)(q.AcquireMany(ctx, []AcquireRequest{
			{Owner: "big", Member: "m", TTL: time.Minute},
			{Owner: "v", Member: "m", TTL: time.Minute},
			{Owner: "w", Member: "m", TTL: time.Minute},
		}))
		for i, d := range got {
			if !d.Allowed || d.Count != 1 {
				t.Fatalf("request #%d: %+v", i, d)
			}
		}
		if calls != 2 {
			t.Fatalf("%d script calls, want 2 (the first stops after moving %d members)", calls, maxBatch)
		}
	})
}
