package expset

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
)

// A sweeper in another process killed (SIGKILL) in the middle of a drain
// (the helper process: kill_test.go).

// TestKillSweeperMidDrain kills a sweeper process (SIGKILL) while it drains
// a shard of thousands of expired members, one owner per batch, with a
// second sweeper (in this process) running all along. It checks that:
//
//   - the kill landed mid-drain: expired members were left unswept;
//   - nothing was swept in the shards the dead sweeper's lease held while
//     it lived (the survivor waited for it to lapse);
//   - afterwards no expired member is left, the index is empty, and every
//     member produced exactly one event, with its deadline (no loss, no
//     duplicate);
//   - the survivor swept every member still unswept at the kill, within the
//     deadline of the wait (killWait; how long it took after the lease
//     lapsed is logged, not asserted: a loaded machine delays anything).
func TestKillSweeperMidDrain(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const (
			owners, per = 1500, 2
			total       = owners * per
			leaseTTL    = 1500 * time.Millisecond
			maxIdle     = 200 * time.Millisecond
		)
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seeded := seedExpired(t, s, owners, per)

		h := startHelper(t, "sweeper", append(b.env(s), helperLease+"="+leaseTTL.String())...)
		h.waitLine("a first batch", func(l string) bool { return strings.HasPrefix(l, "swept ") })
		helper := sweeperTokens(t, s)
		if len(helper) != 1 {
			t.Fatalf("leases %q, want the helper's alone", helper)
		}

		// The survivor runs from now on: it may take a shard the helper has
		// not reached yet, but not one whose lease the helper holds.
		var mu sync.Mutex
		var survivor SweepStats
		var sweepErrs []error
		s.hooks.OnSweep = func(_ context.Context, ci CallInfo, si SweepStats) { mu.Lock(); survivor.add(si); mu.Unlock() }
		s.hooks.OnError = func(_ context.Context, ci CallInfo, retry time.Duration) {
			ei := errorReport{ci, retry}
			mu.Lock()
			sweepErrs = append(sweepErrs, ei.Err)
			mu.Unlock()
		}
		stop := runSweeper(t, newSweeper(t, s, WithLeaseTTL(leaseTTL), WithPollInterval(maxIdle)))

		last := h.waitLine("a tenth of the members swept", func(l string) bool {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[len(f)-1])
			return f[0] == "swept" && n >= total/10
		})
		h.kill()
		killed := time.Now()
		h.mu.Lock()
		lastLine := h.lines[len(h.lines)-1]
		h.mu.Unlock()
		swept, _ := strconv.Atoi(strings.Fields(lastLine)[2])
		// The shards the helper's lease holds, and how long it has left.
		reg := must[store.Registry](t)(s.sweepers(ctx, "", -1))
		end := b.rdb.ZScore(ctx, sweepersKey(s.name), helper[0]).Val()
		leaseLeft := time.Duration(int64(end)-reg.Now) * time.Millisecond
		leaseRead := time.Now()
		var held []int
		for i := range s.shards {
			if holder(reg.Tokens, i) == helper[0] {
				held = append(held, i)
			}
		}

		left := 0
		for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
			left += int(st.MembersDue)
		}
		if left == 0 || swept >= total {
			t.Fatalf("the kill landed after the drain (helper swept %d of %d, %d left): make the drain slower", swept, total, left)
		}
		t.Logf("%s: killed the helper sweeper after it reported %q (last line %q): %d of %d swept, %d members due; its lease, on shards %v, had %v left",
			b.name, last, lastLine, swept, total, left, held, leaseLeft)

		waitHealed(t, "every member swept after the kill", killWait, func() error {
			n := int64(0)
			for _, sk := range s.shards {
				n += b.rdb.XLen(ctx, sk.Events).Val()
			}
			if n < total {
				return fmt.Errorf("%d events of %d", n, total)
			}
			if idx := indexOf(t, s); len(idx) > 0 {
				return fmt.Errorf("%d owners still indexed", len(idx))
			}
			return nil
		})
		drained := time.Now()
		stop()

		checkSwept(t, s, seeded, time.Now())
		seen := map[string]int{}
		var firstAfter, lastAfter int64 = -1, -1
		killMs := killed.UnixMilli()
		for i, sk := range s.shards {
			for _, m := range b.rdb.XRange(ctx, sk.Events, "-", "+").Val() {
				e, err := parseExpiry(i, m, 0)
				if err != nil {
					t.Fatal(err)
				}
				seen[e.Owner+"/"+e.Member]++
				if want := seeded[e.Owner][e.Member]; !e.Deadline.Equal(want) {
					t.Errorf("event %s/%s: deadline %v, want %v", e.Owner, e.Member, e.Deadline, want)
				}
				at := streamMs(t, m.ID)
				if at > killMs {
					if firstAfter < 0 || at < firstAfter {
						firstAfter = at
					}
					lastAfter = max(lastAfter, at)
				}
				// The helper's last script may land a moment after the
				// kill; after that its shards are its lease's alone.
				if slices.Contains(held, i) && leaseLeft > 0 && at >= leaseRead.UnixMilli()+20 && at < int64(end)-2 {
					t.Errorf("event %s written %dms after the kill, while the dead sweeper's lease on shard %d still lived", m.ID, at-killMs, i)
				}
			}
		}
		var dup []string
		for k, n := range seen {
			if n != 1 {
				dup = append(dup, fmt.Sprintf("%s x%d", k, n))
			}
		}
		slices.Sort(dup)
		if len(seen) != total || len(dup) > 0 {
			t.Fatalf("%d of %d members have events; duplicated: %v", len(seen), total, dup)
		}
		if lastAfter < 0 {
			t.Fatal("no event was written after the kill: the survivor swept nothing")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, err := range sweepErrs {
			t.Errorf("survivor reported %v", err)
		}
		t.Logf("%s: after the kill: first survivor event +%dms, last +%dms (lease %v + max idle %v), drained in %v; survivor %+v",
			b.name, firstAfter-killMs, lastAfter-killMs, leaseTTL, maxIdle, drained.Sub(killed).Round(time.Millisecond), survivor)
	})
}
