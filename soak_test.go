package expset

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var soakFlag = flag.Duration("soak", 0, "how long TestSoak's writers run (default 15s, 3s with -short; EXPSET_SOAK sets it too)")

// soakDuration is how long TestSoak writes: -soak, else EXPSET_SOAK, else
// 15s (3s with -short).
func soakDuration(t *testing.T) time.Duration {
	if *soakFlag > 0 {
		return *soakFlag
	}
	if v := os.Getenv("EXPSET_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("EXPSET_SOAK=%q: want a positive duration such as 5m", v)
		}
		return d
	}
	if testing.Short() {
		return 3 * time.Second
	}
	return 15 * time.Second
}

// handledEvent is one delivery a soak consumer's handler got.
type handledEvent struct {
	e  Expiry
	at time.Time
}

// checkAdmissions is the soak's independent over-admission check. For each
// admission X of a quota owner it counts the other members Y certainly
// live when X's script ran: Y's Acquire was answered before X's was sent
// (so Y's script ran first), Y was not released before X was answered, and
// Y's deadline (the latest one set by a call answered before X was sent)
// is after X's "now". Scripts run one at a time, so those Y and X were all
// live together: that count + 1 must be <= limit, and X's reported Count
// >= it. It is a lower bound of the true count (calls that overlap X are
// left out), so it can miss over-admission but never invents it. It
// returns how many admissions it checked, how many of them it found at the
// limit, and the violations.
func checkAdmissions(incs []*incarnation, limit int) (checked, atLimit int, violations []string) {
	byOwner := map[string][]*incarnation{}
	var life int64
	for _, inc := range incs {
		if inc.quota {
			byOwner[inc.owner] = append(byOwner[inc.owner], inc)
			life = max(life, inc.deadline-inc.now)
		}
	}
	window := time.Duration(life)*time.Millisecond + time.Second
	for owner, list := range byOwner {
		sort.Slice(list, func(i, j int) bool { return list[i].end.Before(list[j].end) })
		for _, x := range list {
			// Candidates answered before X was sent, and recently enough to
			// be live: their deadlines are at most life after their answer.
			hi := sort.Search(len(list), func(i int) bool { return !list[i].end.Before(x.start) })
			live := 0
			for j := hi - 1; j >= 0 && x.start.Sub(list[j].end) <= window; j-- {
				y := list[j]
				if y == x || (y.removed && !y.released.After(x.end)) {
					continue
				}
				if y.deadlineAt(x.start) > x.now {
					live++
				}
			}
			checked++
			if live+1 == limit {
				atLimit++
			}
			if live+1 > limit || x.count < live+1 {
				violations = append(violations, fmt.Sprintf("owner %s: admission of %s at %d: %d other members certainly live, Decision.Count %d, limit %d",
					owner, x.member, x.now, live, x.count, limit))
			}
		}
	}
	return checked, atLimit, violations
}

// TestCheckAdmissions shows that checkAdmissions finds an over-admission
// when there is one, and counts a release or an expiry answered before the
// next admission as freeing the slot.
func TestCheckAdmissions(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	adm := func(member string, sent, count int, deadline int64) *incarnation {
		now := at(sent).UnixMilli()
		return &incarnation{owner: "u", member: member, quota: true, start: at(sent), end: at(sent + 1),
			now: now, first: now + deadline, deadline: now + deadline, count: count}
	}
	// Three admissions one after another, each 1s long: a fourth at limit 3
	// is one too many.
	incs := []*incarnation{adm("a", 0, 1, 1000), adm("b", 10, 2, 1000), adm("c", 20, 3, 1000), adm("d", 30, 3, 1000)}
	if _, _, v := checkAdmissions(incs, 3); len(v) != 1 || !strings.Contains(v[0], "admission of d") {
		t.Fatalf("violations %q, want one for d", v)
	}
	// b released before d was sent, and c expired (its deadline 5ms after
	// its now, before d's now): d is fine, and d's Count must be >= 2.
	incs[1].removed, incs[1].released = true, at(25)
	incs[2].deadline, incs[2].first = incs[2].now+5, incs[2].now+5
	if _, atLimit, v := checkAdmissions(incs, 3); len(v) != 0 || atLimit != 1 {
		t.Fatalf("violations %q, %d at the limit: want none, and c at the limit", v, atLimit)
	}
	// A release sent after d was answered ran after d: it frees nothing
	// for d.
	incs[1].released = at(40)
	incs[2].deadline, incs[2].first = incs[2].now+1000, incs[2].now+1000
	if _, _, v := checkAdmissions(incs, 3); len(v) != 1 || !strings.Contains(v[0], "admission of d") {
		t.Fatalf("violations %q, want one for d", v)
	}
	incs[1].released = at(25)
	incs[2].deadline, incs[2].first = incs[2].now+5, incs[2].now+5
	// A Count lower than the certainly-live members is a violation too.
	incs[3].count = 1
	if _, _, v := checkAdmissions(incs, 3); len(v) != 1 || !strings.Contains(v[0], "Decision.Count 1") {
		t.Fatalf("violations %q, want d's Count", v)
	}
}

// TestSoak runs writers, two sweepers and two consumers against one set on
// a dedicated redis-server for soakDuration (15s by default; -soak=5m or
// EXPSET_SOAK=5m for longer), then stops the writers, lets everything due
// drain, and checks (a system test: it runs with EXPSET_SYSTEM=1):
//
//   - no over-admission: every Decision has Count <= limit, every Count
//     read at random moments is <= limit, and the independent lower bound
//     of checkAdmissions never exceeds it;
//   - every member that expired (acquired or added, and not released or
//     removed before its deadline, with its final deadline after extends
//     and re-adds) produced exactly one event (one stream entry: one ID),
//     handled at least once, with its payload; nothing else produced one;
//   - afterwards no owner key, payload key or index entry is left, the
//     streams are empty with nothing pending or dead;
//   - no goroutine is left, and no connection: each client's pool holds
//     only idle connections, within MaxIdleConns, and once they are closed
//     the server serves only the probe's connection.
//
// Writers use unique member IDs, with some re-acquires and re-adds of the
// same ID, so what each member's expiry should produce is known exactly.
// Consumers fail 1 event in 100 on its first attempt, which is then
// redelivered.
func TestSoak(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	dur := soakDuration(t)
	srv := redistest.Start(t)
	ctx := context.Background()
	probe := srv.Client(t, func(o *redis.Options) { o.PoolSize, o.MaxIdleConns = 1, 1 })
	name := uniqueName(t, probe)
	const idle = 4
	var clients []*redis.Client
	open := func() *Set {
		t.Helper()
		c := srv.Client(t, func(o *redis.Options) { o.PoolSize, o.MaxIdleConns = 32, idle })
		clients = append(clients, c)
		return must[*Set](t)(Open(context.Background(), c, name, WithShards(4), WithExpiryEvents(), WithPayloadStorage()))
	}

	// Two sweepers and two consumers, each with its own client, like
	// separate processes.
	var mu sync.Mutex
	var swept SweepStats
	leaseLost := 0
	var stops []func()
	for i := 0; i < 2; i++ {
		s := open()
		s.hooks.OnSweep = func(_ context.Context, ci CallInfo, si SweepStats) { mu.Lock(); swept.add(si); mu.Unlock() }
		s.hooks.OnError = func(_ context.Context, ci CallInfo, retry time.Duration) {
			ei := errorReport{ci, retry}
			if errors.Is(ei.Err, ErrLeaseLost) {
				mu.Lock()
				leaseLost++
				mu.Unlock()
				return
			}
			t.Errorf("sweeper: %v", ei.Err)
		}
		w := newSweeper(t, s, WithLeaseTTL(time.Second), WithPollInterval(50*time.Millisecond))
		stops = append(stops, runSweeper(t, w))
	}
	var handled []handledEvent
	failFirst := 0
	for i := 0; i < 2; i++ {
		s := open()
		stops = append(stops, consumeInBackground(t, s, "soak", "c"+strconv.Itoa(i), func(_ context.Context, e Expiry) error {
			mu.Lock()
			handled = append(handled, handledEvent{e, time.Now()})
			mu.Unlock()
			h := fnv.New32a()
			h.Write([]byte(e.ID))
			if e.Attempt == 1 && h.Sum32()%100 == 0 {
				mu.Lock()
				failFirst++
				mu.Unlock()
				return errors.New("soak: fails on its first attempt")
			}
			return nil
		}, WithLeaseTTL(2*time.Second), WithPollInterval(10*time.Millisecond), WithReadBatch(20)))
	}

	// Writers: 8 on the quota's 6 owners, 4 adding to 8 owners of their
	// own; all share one client. An auditor reads the quota owners.
	ws := open()
	q := must[*Quota](t)(NewQuota(ws, soakLimit))
	quotaOwners := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	addOwners := []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}
	var stopWriters atomic.Bool
	var wg sync.WaitGroup
	writers := make([]*soakWriter, 12)
	for i := range writers {
		w := &soakWriter{id: i, quota: i < 8, q: q, s: ws, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))}
		writers[i] = w
		owners := addOwners
		if w.quota {
			owners = quotaOwners
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopWriters.Load() {
				if err := w.step(ctx, owners); err != nil {
					t.Errorf("writer %d: %v", w.id, err)
					stopWriters.Store(true)
				}
			}
		}()
	}
	audits := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopWriters.Load() {
			o := quotaOwners[audits%len(quotaOwners)]
			ms, err := ws.Members(ctx, o, 0)
			if err != nil || len(ms) > soakLimit {
				t.Errorf("over-admission or error: Members(%s) = %v, %v", o, ms, err)
				stopWriters.Store(true)
			}
			audits++
			time.Sleep(time.Millisecond)
		}
	}()
	began := time.Now()
	for time.Since(began) < dur && !stopWriters.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	stopWriters.Store(true)
	wg.Wait()
	wrote := time.Since(began)
	if t.Failed() {
		t.FailNow()
	}

	// What should have happened: one event for each incarnation not
	// removed live, with its final deadline.
	var ops soakOps
	var all []*incarnation
	var latest int64
	for _, w := range writers {
		ops.add(w.ops)
		all = append(all, w.all...)
	}
	type key struct {
		owner, member string
		deadline      int64
	}
	want := map[key]bool{}
	for _, inc := range all {
		latest = max(latest, inc.deadline)
		if !inc.removed {
			k := key{inc.owner, inc.member, inc.deadline}
			if want[k] {
				t.Fatalf("two incarnations of %v", k)
			}
			want[k] = true
		}
	}
	checked, atLimit, violations := checkAdmissions(all, soakLimit)
	for _, v := range violations {
		t.Errorf("over-admission: %s", v)
	}

	// Drain: every deadline passes, the sweepers and consumers finish.
	time.Sleep(time.Until(time.UnixMilli(latest + 5)))
	drainStart := time.Now()
	waitHealed(t, "everything due swept, evented and handled", 2*time.Minute, func() error {
		stats, err := ws.Stats(ctx)
		if err != nil {
			return err
		}
		for _, st := range stats {
			if st.Owners != 0 || st.Events != 0 || st.Pending != 0 || st.Dead != 0 {
				return fmt.Errorf("shard %d: %+v", st.Shard, st)
			}
		}
		return nil
	})
	drained := time.Since(drainStart)
	for _, stop := range stops {
		stop()
	}

	// Every expected event handled, each from exactly one stream entry.
	ids := map[key]map[string]bool{}
	var maxLate time.Duration
	redelivered := 0
	for _, h := range handled {
		e := h.e
		k := key{e.Owner, e.Member, e.Deadline.UnixMilli()}
		if !want[k] {
			t.Errorf("event %+v matches no expired member (released, or another deadline)", e)
			continue
		}
		if string(e.Payload) != e.Member {
			t.Errorf("event %s/%s: payload %q", e.Owner, e.Member, e.Payload)
		}
		if ids[k] == nil {
			ids[k] = map[string]bool{}
		}
		ids[k][eventKey(e)] = true
		if e.Attempt > 1 {
			redelivered++
		} else {
			maxLate = max(maxLate, h.at.Sub(e.Deadline))
		}
	}
	missing, dup := 0, 0
	for k := range want {
		switch n := len(ids[k]); {
		case n == 0:
			missing++
			if missing <= 5 {
				t.Errorf("no event for %v", k)
			}
		case n > 1:
			dup++
			if dup <= 5 {
				t.Errorf("%d events (stream entries) for %v", n, k)
			}
		}
	}
	if missing+dup > 0 {
		t.Errorf("%d of %d expired members without an event, %d with several", missing, len(want), dup)
	}
	if d := must[[]DeadLetter](t)(ws.DeadLetters(ctx, allShards, 0)); len(d) != 0 {
		t.Errorf("%d dead letters, first %+v", len(d), d[0])
	}
	for _, k := range setKeys(t, probe, name) {
		if strings.Contains(k, "}:o:") || strings.Contains(k, "}:p:") || strings.HasSuffix(k, ":lease") {
			t.Errorf("key %s left after the drain", k)
		}
	}

	// Connections: nothing checked out, idle ones within MaxIdleConns; after
	// Close, the server serves the probe alone.
	for i, c := range clients {
		if st := c.PoolStats(); st.TotalConns != st.IdleConns || st.IdleConns > idle {
			t.Errorf("client %d after everything stopped: %d connections, %d idle (MaxIdleConns %d)", i, st.TotalConns, st.IdleConns, idle)
		}
		_ = c.Close()
	}
	waitDrained(t, probe)

	mu.Lock()
	defer mu.Unlock()
	t.Logf("soak: %v of writes, %d ops (%.0f/s): %+v; %d audits of Members",
		wrote.Round(time.Millisecond), ops.total(), float64(ops.total())/wrote.Seconds(), ops, audits)
	t.Logf("soak: %d admissions checked against the limit independently, %d found at the limit", checked, atLimit)
	t.Logf("soak: %d expiries expected, %d deliveries handled (%d redelivered; %d first attempts failed on purpose); drained %v after the last deadline",
		len(want), len(handled), redelivered, failFirst, drained.Round(time.Millisecond))
	t.Logf("soak: sweepers removed %d (the rest were dropped by writes) in %d batches, max lateness %v; %d leases lost; max deadline-to-first-delivery %v",
		swept.Expired, swept.Batches, swept.MaxLateness, leaseLost, maxLate.Round(time.Millisecond))
}
