package expset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// waitKeys returns owner's wait line and ticket leases keys.
func waitKeys(s *Set, owner string) (line, leases string) {
	sk := &s.shards[s.ShardOf(owner)]
	return sk.Line + owner, sk.Leases + owner
}

// waitQueued waits until owner's line holds n tickets.
func waitQueued(t *testing.T, rdb redis.UniversalClient, s *Set, owner string, n int64) {
	t.Helper()
	line, _ := waitKeys(s, owner)
	end := time.Now().Add(30 * time.Second)
	for {
		got, err := rdb.ZCard(context.Background(), line).Result()
		if err == nil && got == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("line of %q: %d tickets (%v), want %d", owner, got, err, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkNoTrace fails t unless owner's line and leases are gone.
func checkNoTrace(t *testing.T, b backend, s *Set, owner string) {
	t.Helper()
	line, leases := waitKeys(s, owner)
	if n := b.rdb.Exists(context.Background(), line, leases).Val(); n != 0 {
		t.Fatalf("the wait line of %q is left behind: %v, %v", owner,
			b.rdb.ZRangeWithScores(context.Background(), line, 0, -1).Val(), b.rdb.ZRangeWithScores(context.Background(), leases, 0, -1).Val())
	}
}

// waitAsync runs AcquireWait of member for owner "tenant" in a goroutine;
// the channel gets its error, or one saying it was not allowed.
func waitAsync(ctx context.Context, q *Quota, member string, opts ...AcquireOption) <-chan error {
	done := make(chan error, 1)
	go func() {
		d, err := q.AcquireWait(ctx, "tenant", member, time.Minute, opts...)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("%s not allowed: %+v", member, d)
		}
		done <- err
	}()
	return done
}

// waitRecorder collects Hooks.OnWait reports.
type waitRecorder struct {
	mu    sync.Mutex
	infos []CallInfo
}

func (r *waitRecorder) hook(_ context.Context, wi CallInfo) {
	r.mu.Lock()
	r.infos = append(r.infos, wi)
	r.mu.Unlock()
}

func (r *waitRecorder) counts() (admitted, gaveUp int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, wi := range r.infos {
		if wi.Err == nil {
			admitted++
		} else {
			gaveUp++
		}
	}
	return admitted, gaveUp
}

// TestAcquireWaitFIFO: limit 1 or 2, the test holds every slot while 12
// waiters join one at a time; released, they are admitted in arrival order
// (checked exactly with limit 1, where each admission needs the previous
// member's release), never more than the limit at once, every one of them;
// Hooks.OnWait counts them; nothing of the line is left, and the shared
// goroutines stop.
func TestAcquireWaitFIFO(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		for _, limit := range []int{1, 2} {
			t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
				const n = 12
				ctx := context.Background()
				var rec waitRecorder
				s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithHooks(Hooks{OnWait: rec.hook})))
				q := must[*Quota](t)(NewQuota(s, limit))
				for i := 0; i < limit; i++ {
					if d := must[Decision](t)(q.Acquire(ctx, "tenant", "hold"+strconv.Itoa(i), time.Minute)); !d.Allowed {
						t.Fatalf("holder %d denied: %+v", i, d)
					}
				}
				var held, most atomic.Int32
				var mu sync.Mutex
				var order []int
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						m := "job" + strconv.Itoa(i)
						d, err := q.AcquireWait(ctx, "tenant", m, time.Minute)
						if err != nil || !d.Allowed {
							errs <- fmt.Errorf("%s: %+v %v", m, d, err)
							return
						}
						h := held.Add(1)
						for cur := most.Load(); h > cur && !most.CompareAndSwap(cur, h); cur = most.Load() {
						}
						mu.Lock()
						order = append(order, i)
						mu.Unlock()
						time.Sleep(2 * time.Millisecond)
						held.Add(-1)
						if _, err := q.Release(ctx, "tenant", m); err != nil {
							errs <- err
						}
					}()
					waitQueued(t, b.rdb, s, "tenant", int64(i+1))
				}
				if d := must[Decision](t)(q.Acquire(ctx, "tenant", "late", time.Minute)); d.Allowed {
					t.Fatalf("a plain Acquire overtook %d waiters: %+v", n, d)
				}
				for i := 0; i < limit; i++ {
					must[bool](t)(q.Release(ctx, "tenant", "hold"+strconv.Itoa(i)))
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				want := make([]int, n)
				for i := range want {
					want[i] = i
				}
				if limit == 1 && !slices.Equal(order, want) {
					t.Errorf("admitted in order %v, want arrival order", order)
				}
				if len(order) != n {
					t.Errorf("%d of %d admitted", len(order), n)
				}
				if got := most.Load(); got > int32(limit) {
					t.Errorf("%d held at once, limit %d", got, limit)
				}
				if a, g := rec.counts(); a != n || g != 0 {
					t.Errorf("OnWait: %d admitted, %d given up; want %d, 0", a, g, n)
				}
				checkNoTrace(t, b, s, "tenant")
			})
		}
	})
}

// TestAcquireWaitContextEnds: a waiter whose context ends returns the
// context's error, holds nothing, and leaves no ticket; when it was the head,
// the waiter behind it becomes the head and is admitted on the next release.
func TestAcquireWaitContextEnds(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var rec waitRecorder
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithHooks(Hooks{OnWait: rec.hook})))
		q := must[*Quota](t)(NewQuota(s, 1))
		must[Decision](t)(q.Acquire(ctx, "tenant", "hold", time.Minute))

		// Alone: the deadline passes while it waits.
		short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		d, err := q.AcquireWait(short, "tenant", "gone", time.Minute)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("got %+v, %v; want context.DeadlineExceeded", d, err)
		}
		checkNoTrace(t, b, s, "tenant")
		if ok := must[bool](t)(s.Contains(ctx, "tenant", "gone")); ok {
			t.Fatal("the waiter that gave up holds a slot")
		}

		// At the head, with a second waiter behind it.
		headCtx, cancelHead := context.WithCancel(ctx)
		headDone := waitAsync(headCtx, q, "head")
		waitQueued(t, b.rdb, s, "tenant", 1)
		second := waitAsync(ctx, q, "second")
		waitQueued(t, b.rdb, s, "tenant", 2)
		cancelHead()
		if err := <-headDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("head: %v, want context.Canceled", err)
		}
		waitQueued(t, b.rdb, s, "tenant", 1)
		must[bool](t)(q.Release(ctx, "tenant", "hold"))
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if ok := must[bool](t)(s.Contains(ctx, "tenant", "head")); ok {
			t.Fatal("the head that gave up holds a slot")
		}
		checkNoTrace(t, b, s, "tenant")
		if a, g := rec.counts(); a != 1 || g != 2 {
			t.Errorf("OnWait: %d admitted, %d given up; want 1, 2", a, g)
		}

		// A context already ended: nothing is sent.
		done, cancelDone := context.WithCancel(ctx)
		cancelDone()
		if _, err := q.AcquireWait(done, "tenant", "x", time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("ended context: %v", err)
		}
	})
}

// TestAcquireWaitWakeLatency measures how soon a Release admits the waiter
// at the head (logged, never asserted: the machine is shared).
func TestAcquireWaitWakeLatency(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const rounds = 30
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 1))
		must[Decision](t)(q.Acquire(ctx, "tenant", "m0", time.Minute))
		lat := make([]time.Duration, 0, rounds)
		for i := 1; i <= rounds; i++ {
			got := make(chan time.Time, 1)
			go func() {
				d, err := q.AcquireWait(ctx, "tenant", "m"+strconv.Itoa(i), time.Minute)
				if err != nil || !d.Allowed {
					t.Errorf("round %d: %+v %v", i, d, err)
				}
				got <- time.Now()
			}()
			waitQueued(t, b.rdb, s, "tenant", 1)
			released := time.Now()
			must[bool](t)(q.Release(ctx, "tenant", "m"+strconv.Itoa(i-1)))
			lat = append(lat, (<-got).Sub(released))
		}
		slices.Sort(lat)
		t.Logf("%s: Release to admission of the head, %d rounds: median %v, p90 %v, max %v",
			b.name, rounds, lat[rounds/2], lat[rounds*9/10], lat[rounds-1])
	})
}

// TestAcquireWaitExpiry: with no release, the head is admitted when the
// member it waits for expires; an Extend of that member meanwhile makes it
// wait for the new deadline.
func TestAcquireWaitExpiry(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 1))
		held := must[Decision](t)(q.Acquire(ctx, "tenant", "hold", 2*time.Second))
		type result struct {
			d   Decision
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			d, err := q.AcquireWait(ctx, "tenant", "next", time.Minute)
			got <- result{d, err, time.Now()}
		}()
		waitQueued(t, b.rdb, s, "tenant", 1)
		extended := must[time.Time](t)(s.Extend(ctx, "tenant", "hold", 2500*time.Millisecond))
		r := <-got
		if r.err != nil || !r.d.Allowed {
			t.Fatalf("%+v %v", r.d, r.err)
		}
		// Redis's clock decides; the admission's deadline is counted from it.
		if adm := r.d.Deadline.Add(-time.Minute); adm.Before(extended) {
			t.Fatalf("admitted at %v, before the extended deadline %v (first deadline %v)", adm, extended, held.Deadline)
		}
		t.Logf("%s: admitted %v after the extended deadline", b.name, r.d.Deadline.Add(-time.Minute).Sub(extended))
		checkNoTrace(t, b, s, "tenant")
	})
}

// TestAcquireRespectsLine: while tickets wait, a plain Acquire may take only
// the free slots the line does not need (one ticket written by hand, with a
// live lease, stands for a waiter that has not been admitted yet); once its
// lease lapses the line no longer holds anything back.
func TestAcquireRespectsLine(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 2))
		now := serverNow(t, b)
		leases := plantTicket(t, b, s, "other-1", now.Add(time.Minute))

		d := must[Decision](t)(q.Acquire(ctx, "tenant", "a", time.Minute))
		if !d.Allowed {
			t.Fatalf("limit 2, one waiter: the second slot is free for Acquire: %+v", d)
		}
		d = must[Decision](t)(q.Acquire(ctx, "tenant", "b", time.Minute))
		if d.Allowed || d.Count != 1 || d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
			t.Fatalf("the last slot belongs to the waiter: %+v", d)
		}
		if d := must[Decision](t)(q.Acquire(ctx, "tenant", "a", time.Minute)); !d.Allowed || !d.Existing {
			t.Fatalf("a member already held is not held back by the line: %+v", d)
		}
		// The waiter's lease lapses; a live waiter's call drops it.
		b.rdb.ZAdd(ctx, leases, redisZ(float64(now.Add(-time.Second).UnixMilli()), "other-1"))
		if err := <-waitAsync(ctx, q, "c"); err != nil {
			t.Fatal(err)
		}
		if ok := must[bool](t)(s.Contains(ctx, "tenant", "c")); !ok {
			t.Fatal("c not held")
		}
		checkNoTrace(t, b, s, "tenant")
	})
}

// TestAcquireWaitDeadHead: a ticket at the head whose waiter is gone (its
// lease written to end 300ms from now, then never renewed) holds the line
// until its lease lapses: the waiter behind it is then admitted, not
// before. How long after is logged beside the promise (waitLease +
// waitRenew), not asserted: the test waits for the admission up to
// killWait.
func TestAcquireWaitDeadHead(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), killWait)
		defer cancel()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 1))
		lapse := serverNow(t, b).Add(300 * time.Millisecond)
		plantTicket(t, b, s, "crashed-1", lapse)

		d, err := q.AcquireWait(ctx, "tenant", "alive", time.Minute)
		if err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		at := d.Deadline.Add(-time.Minute)
		if at.Before(lapse) {
			t.Fatalf("admitted at %v, before the dead head's lease lapsed at %v", at, lapse)
		}
		t.Logf("%s: admitted %v after the dead head's lease lapsed (promised within %v)", b.name, at.Sub(lapse), waitLease+waitRenew)
		checkNoTrace(t, b, s, "tenant")
	})
}

// TestAcquireWaitPayload: a waiter's payload is stored with its member when
// it is admitted (a set with payloads: the scripts' full key list, with the
// line's keys after it).
func TestAcquireWaitPayload(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithPayloadStorage()))
		q := must[*Quota](t)(NewQuota(s, 1))
		must[Decision](t)(q.Acquire(ctx, "tenant", "hold", time.Minute, WithPayload([]byte("h"))))
		done := waitAsync(ctx, q, "next", WithPayload([]byte("job-7")))
		waitQueued(t, b.rdb, s, "tenant", 1)
		must[bool](t)(q.Release(ctx, "tenant", "hold"))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if p := must[[]byte](t)(s.Payload(ctx, "tenant", "next")); string(p) != "job-7" {
			t.Fatalf("payload %q", p)
		}
		checkNoTrace(t, b, s, "tenant")
	})
}

// TestAcquireWaitEvictOldest: a quota that evicts never waits.
func TestAcquireWaitEvictOldest(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 1, WithEvictOldest()))
		must[Decision](t)(q.AcquireWait(ctx, "tenant", "a", time.Minute))
		d := must[Decision](t)(q.AcquireWait(ctx, "tenant", "b", time.Minute))
		if !d.Allowed || !slices.Equal(d.Evicted, []string{"a"}) {
			t.Fatalf("%+v", d)
		}
		checkNoTrace(t, b, s, "tenant")
	})
}

// plantTicket puts ticket first in the line of owner "tenant", with a lease
// until lease, as a waiter in another process would; it returns the leases
// key.
func plantTicket(t *testing.T, b backend, s *Set, ticket string, lease time.Time) string {
	t.Helper()
	ctx := context.Background()
	line, leases := waitKeys(s, "tenant")
	b.rdb.ZAdd(ctx, line, redisZ(1, ticket))
	b.rdb.ZAdd(ctx, leases, redisZ(float64(lease.UnixMilli()), ticket))
	b.rdb.PExpire(ctx, line, time.Minute)
	b.rdb.PExpire(ctx, leases, time.Minute)
	return leases
}

// serverNow reads the server's clock (the scripts' "now").
func serverNow(t *testing.T, b backend) time.Time {
	t.Helper()
	if b.mr != nil {
		return time.Now()
	}
	now, err := b.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// TestTransient: the errors a waiter rides out, and those that end its wait.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("expset: acquire k: %w", &net.OpError{Op: "read", Err: syscall.ECONNRESET}), true},
		{fmt.Errorf("expset: acquire k: %w", io.EOF), true},
		{redis.ErrPoolTimeout, true},
		{fmt.Errorf("expset: acquire k: %w", redisErr("LOADING Redis is loading the dataset in memory")), true},
		{redisErr("CLUSTERDOWN The cluster is down"), true},
		{redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisErr("READONLY You can't write against a read only replica."), true},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisErr("ERR Error running script"), false},
		{redis.ErrClosed, false},
		{context.Canceled, false},
		{store.Unexpected("acquire.lua", "x"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// redisErr is an error reply as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}
