package expset

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// contend runs workers goroutines that each try to acquire distinct members
// for the same few owners, all released by one start signal, and returns how
// many acquisitions each owner got.
func contend(owners, workers, perWorker int, acquire func(owner, member string) (bool, error)) (map[string]int, error) {
	var (
		mu       sync.Mutex
		admitted = map[string]int{}
		firstErr atomic.Value
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			for i := 0; i < perWorker; i++ {
				owner := "owner" + strconv.Itoa((w+i)%owners)
				ok, err := acquire(owner, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if ok {
					mu.Lock()
					admitted[owner]++
					mu.Unlock()
				}
			}
		}(w)
	}
	close(start)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return admitted, nil
}

func overAdmissions(admitted map[string]int, limit int) int {
	n := 0
	for _, c := range admitted {
		if c > limit {
			n += c - limit
		}
	}
	return n
}

// TestConcurrentAcquireNeverOverAdmits races 64 goroutines over 8 owners at
// limit 3 on a real Redis: the library admits exactly 3 per owner, while the
// naive ZCARD-then-ZADD recipe, raced the same way, admits more.
//
// Not parallel with other tests: their load on the machine can serialize
// the naive recipe's goroutines enough that it never over-admits.
func TestConcurrentAcquireNeverOverAdmits(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const owners, workers, perWorker, limit = 8, 64, 20, 3

	for round := 0; round < 3; round++ {
		s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb)))
		q := must[*Quota](t)(NewQuota(s, limit))
		var inDecision atomic.Int64
		admitted, err := contend(owners, workers, perWorker, func(owner, member string) (bool, error) {
			d, err := q.Acquire(ctx, owner, member, time.Minute)
			if d.Count > limit {
				inDecision.Add(1)
			}
			return d.Allowed && !d.Existing, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if v := overAdmissions(admitted, limit); v != 0 || inDecision.Load() != 0 {
			t.Fatalf("round %d: %d over-admissions, %d decisions over the limit: %v", round, v, inDecision.Load(), admitted)
		}
		for o := 0; o < owners; o++ {
			owner := "owner" + strconv.Itoa(o)
			if admitted[owner] != limit {
				t.Fatalf("owner %s admitted %d, want exactly %d", owner, admitted[owner], limit)
			}
			if n := must[int](t)(s.Count(ctx, owner)); n != limit {
				t.Fatalf("owner %s holds %d", owner, n)
			}
		}
	}

	// The naive recipe: ZCARD, then ZADD if under the limit, from Go.
	naiveViolations := 0
	for round := 0; round < 5 && naiveViolations == 0; round++ {
		prefix := "naive:" + uniqueName(t, rdb) + ":"
		admitted, err := contend(owners, workers, perWorker, func(owner, member string) (bool, error) {
			key := prefix + owner
			n, err := rdb.ZCard(ctx, key).Result()
			if err != nil || n >= limit {
				return false, err
			}
			return true, rdb.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: member}).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		for o := 0; o < owners; o++ {
			rdb.Del(ctx, prefix+"owner"+strconv.Itoa(o))
		}
		naiveViolations += overAdmissions(admitted, limit)
	}
	t.Logf("naive ZCARD-then-ZADD over-admissions: %d; library: 0", naiveViolations)
	if naiveViolations == 0 {
		t.Fatal("the naive recipe never over-admitted: the race is not being exercised")
	}
}

// TestConcurrentAcquireReleaseHoldsLimit churns acquires and releases: no
// decision may ever report more live members than the limit.
func TestConcurrentAcquireReleaseHoldsLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 3))
		var violations, admitted atomic.Int64
		_, err := contend(4, 32, 30, func(owner, member string) (bool, error) {
			d, err := q.Acquire(ctx, owner, member, time.Minute)
			if err != nil {
				return false, err
			}
			if d.Count > 3 {
				violations.Add(1)
			}
			if d.Allowed {
				admitted.Add(1)
				_, err = q.Release(ctx, owner, member)
			}
			return d.Allowed, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if violations.Load() != 0 {
			t.Fatalf("%d decisions over the limit", violations.Load())
		}
		if admitted.Load() == 0 {
			t.Fatal("nothing admitted")
		}
	})
}
