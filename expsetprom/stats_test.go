package expsetprom_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/expset/expset/expsetprom"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// gather collects reg into name{shard} -> value, or name{group} -> value
// for a group's gauge, for the set's samples.
func gather(t *testing.T, reg *prometheus.Registry, set string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["set"] != set {
				t.Errorf("%s: set label %q, want %q", mf.GetName(), labels["set"], set)
			}
			if mf.GetType().String() != "GAUGE" {
				t.Errorf("%s is a %s, want a gauge", mf.GetName(), mf.GetType())
			}
			got[mf.GetName()+"{"+labels["shard"]+labels["group"]+"}"] = m.GetGauge().GetValue()
		}
	}
	return got
}

// sumShards sums metric over shards 0 to n-1 of got (see gather).
func sumShards(got map[string]float64, metric string, n int) float64 {
	var sum float64
	for shard := 0; shard < n; shard++ {
		sum += got[metric+"{"+strconv.Itoa(shard)+"}"]
	}
	return sum
}

func TestStatsCollector(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		name := "prom-" + uuid.NewString()[:8]
		now := time.Now().Truncate(time.Second)
		set, err := expset.Open(context.Background(), rdb, name, expset.WithShards(4), expset.WithExpiryEvents(),
			expset.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = expset.Drop(context.Background(), rdb, name) })
		past, err := expset.Open(context.Background(), rdb, name, expset.WithShards(4), expset.WithExpiryEvents(),
			expset.WithClock(func() time.Time { return now.Add(-time.Minute) }))
		if err != nil {
			t.Fatal(err)
		}
		// The live member first: a later write on "a" would sweep its expired one.
		if _, err := set.Add(ctx, "a", "live", time.Hour); err != nil {
			t.Fatal(err)
		}
		owners := []string{"a", "b", "c", "d", "e"}
		for _, o := range owners {
			if _, err := past.Add(ctx, o, "expired", 30*time.Second); err != nil { // due 30s ago
				t.Fatal(err)
			}
		}

		reg := prometheus.NewRegistry()
		reg.MustRegister(expsetprom.NewStatsCollector(set))
		got := gather(t, reg, name)
		if len(got) != 14*4 {
			t.Errorf("%d samples, want 14 gauges x 4 shards: %v", len(got), got)
		}
		due := map[int]float64{}
		for _, o := range owners {
			due[set.ShardOf(o)]++
		}
		for shard := 0; shard < 4; shard++ {
			s := strconv.Itoa(shard)
			want := map[string]float64{
				"expset_shard_owners":              due[shard],
				"expset_shard_owners_due":          due[shard],
				"expset_shard_members_due":         due[shard],
				"expset_shard_members_due_partial": 0,
				"expset_shard_jobs_due":            0,
				"expset_shard_stalled":             min(due[shard], 1), // due work, no sweeper
				"expset_shard_events":              0,
				"expset_shard_pending":             0,
				"expset_shard_dead_letters":        0,
				"expset_shard_events_trimmed":      0,
				"expset_shard_lease_held":          0,
				"expset_shard_server_evicted_keys": 0,
				"expset_shard_lag_seconds":         0,
			}
			if due[shard] > 0 {
				want["expset_shard_lag_seconds"] = 30
			}
			for metric, w := range want {
				if v, ok := got[metric+"{"+s+"}"]; !ok || v != w {
					t.Errorf("%s{shard=%q} = %v (present %v), want %v", metric, s, v, ok, w)
				}
			}
		}

		// Read afresh on every scrape: after a sweep nothing is due and
		// every expired member became an event.
		w, err := expset.NewSweeper(set)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
		got = gather(t, reg, name)
		events, membersDue := sumShards(got, "expset_shard_events", 4), sumShards(got, "expset_shard_members_due", 4)
		if events != 5 || membersDue != 0 {
			t.Errorf("after the sweep: %v events, %v members due; want 5 and 0", events, membersDue)
		}
	})
}

// TestStatsCollectorReadFails: a failed read fails the scrape with an error
// naming the set, rather than serving stale or zero numbers.
func TestStatsCollectorReadFails(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	set, err := expset.Open(context.Background(), rdb, "orders")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(expsetprom.NewStatsCollector(set, expsetprom.WithNamespace("shop"), expsetprom.WithStatsTimeout(time.Second)))
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("healthy gather: %v", err)
	}
	mr.Close()
	_, err = reg.Gather()
	if err == nil || !strings.Contains(err.Error(), `"orders"`) || !strings.Contains(err.Error(), "shop_shard_stats") {
		t.Fatalf("gather with Redis down: %v; want an error naming the set", err)
	}
	_ = rdb.Close()
}

// openExpired opens the set name with expiry events, WithConsumerGroups
// groups and opts, adds members of owners (owner -> members) whose
// deadline passed 30s ago, and sweeps them into events.
func openExpired(t *testing.T, rdb redis.UniversalClient, name string, owners map[string][]string, opts ...expset.OpenOption) *expset.Set {
	t.Helper()
	ctx := context.Background()
	opts = append([]expset.OpenOption{expset.WithShards(4), expset.WithExpiryEvents()}, opts...)
	set, err := expset.Open(ctx, rdb, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = expset.Drop(context.Background(), rdb, name) })
	past, err := expset.Open(ctx, rdb, name, append(opts, expset.WithClock(func() time.Time { return time.Now().Add(-time.Minute) }))...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for o, members := range owners {
		for _, m := range members {
			if _, err := past.Add(ctx, o, m, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	w, err := expset.NewSweeper(set)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.SweepOnce(ctx); err != nil || st.Expired != n {
		t.Fatalf("sweep: %+v, %v; want %d expired", st, err, n)
	}
	return set
}

// consume runs set.Consume in the background until the returned stop (also
// run at cleanup), which waits for it to return and fails the test if it
// returned an error.
func consume(t *testing.T, set *expset.Set, group string, handle func(context.Context, expset.Expiry) error, opts ...expset.ConsumeOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- set.Consume(ctx, group, "c1", handle, opts...) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Consume: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitGauges scrapes reg until every gauge of want has its value, and
// fails the test with the last scrape if that does not happen within 10s.
func waitGauges(t *testing.T, reg *prometheus.Registry, set, what string, want map[string]float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := gather(t, reg, set)
		missing := ""
		for k, w := range want {
			if v, ok := got[k]; !ok || v != w {
				missing += fmt.Sprintf(" %s=%v (want %v)", k, v, w)
			}
		}
		if missing == "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 10s,%s", what, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStatsCollectorRunning: a Consume WithOwnerConcurrency(2) whose handler
// calls block until released holds 2 calls of owner a, 2 of b and a job's
// (a's third event waits at the cap: held back); the group's gauges count
// the 5 calls, 2 owners and 1 held back, the oldest call's age grows, no
// label names the owner jobs are kept under, and all fall to zero once the
// calls end.
func TestStatsCollectorRunning(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		name := "prom-" + uuid.NewString()[:8]
		set := openExpired(t, rdb, name, map[string][]string{"a": {"1", "2", "3"}, "b": {"1", "2"}},
			expset.WithConsumerGroups("g"))
		past, err := expset.Open(ctx, rdb, name, expset.WithShards(4), expset.WithExpiryEvents(), expset.WithConsumerGroups("g"),
			expset.WithClock(func() time.Time { return time.Now().Add(-time.Minute) }))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := past.Put(ctx, "job-1", time.Second); err != nil {
			t.Fatal(err)
		}
		if w, err := expset.NewSweeper(set); err != nil {
			t.Fatal(err)
		} else if _, err := w.SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(expsetprom.NewStatsCollector(set))

		var running atomic.Int64
		release := make(chan struct{})
		started := time.Now()
		stop := consume(t, set, "g", func(ctx context.Context, e expset.Expiry) error {
			running.Add(1)
			defer running.Add(-1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, expset.WithOwnerConcurrency(2), expset.WithConcurrency(8), expset.WithPollInterval(5*time.Millisecond))
		got := waitGauges(t, reg, name, "5 calls of 2 owners, 1 held back", map[string]float64{
			"expset_group_running{g}":        5,
			"expset_group_running_owners{g}": 2,
			"expset_group_held_back{g}":      1,
		})
		if running.Load() != 5 {
			t.Fatalf("%d calls running, want a's 2, b's 2 and the job's", running.Load())
		}
		if n := len(got); n != 14*4+10 {
			t.Errorf("%d samples, want 14 gauges x 4 shards + 10 gauges x 1 group: %v", n, got)
		}
		// No call ended: each event is unread or pending.
		if lag, pending := got["expset_group_lag{g}"], got["expset_group_pending{g}"]; lag+pending != 6 || pending < 5 {
			t.Errorf("lag %v, pending %v: want 6 events, at least the 5 running pending", lag, pending)
		}
		if got["expset_group_retries_scheduled{g}"] != 0 || got["expset_group_dead_letters{g}"] != 0 {
			t.Errorf("retries %v, dead letters %v; want none", got["expset_group_retries_scheduled{g}"], got["expset_group_dead_letters{g}"])
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			age := gather(t, reg, name)["expset_group_oldest_running_seconds{g}"]
			if age > 0.05 {
				if limit := time.Since(started).Seconds() + 1; age > limit {
					t.Errorf("oldest call's age %vs, want at most %vs", age, limit)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 10s, the oldest call's age is %vs, want over 0.05s", age)
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if strings.Contains(l.GetValue(), "\x00job") || strings.Contains(l.GetValue(), "job:") {
						t.Errorf("%s: label %s=%q names the owner jobs are kept under", mf.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}

		close(release)
		waitGauges(t, reg, name, "every call ended", map[string]float64{
			"expset_group_running{g}":                0,
			"expset_group_running_owners{g}":         0,
			"expset_group_held_back{g}":              0,
			"expset_group_oldest_running_seconds{g}": 0,
			"expset_group_pending{g}":                0,
			"expset_group_lag{g}":                    0,
		})
		stop()
	})
}

// TestStatsCollectorRetriesAndDeadLetters: a handler that retries owner r's
// event in an hour, buries d's and handles ok's leaves group g one retry
// scheduled (pending) and one dead letter, per group and per shard; group h,
// which read nothing, lags by the 3 events.
func TestStatsCollectorRetriesAndDeadLetters(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		name := "prom-" + uuid.NewString()[:8]
		set := openExpired(t, rdb, name, map[string][]string{"r": {"1"}, "d": {"1"}, "ok": {"1"}},
			expset.WithConsumerGroups("g", "h"))
		reg := prometheus.NewRegistry()
		reg.MustRegister(expsetprom.NewStatsCollector(set))

		stop := consume(t, set, "g", func(_ context.Context, e expset.Expiry) error {
			switch e.Owner {
			case "r":
				return expset.RetryAfter(errors.New("not yet"), time.Hour)
			case "d":
				return expset.Bury(errors.New("malformed"))
			}
			return nil
		}, expset.WithPollInterval(5*time.Millisecond))
		waitGauges(t, reg, name, "a retry and a dead letter", map[string]float64{
			"expset_group_retries_scheduled{g}": 1,
			"expset_group_dead_letters{g}":      1,
			"expset_group_pending{g}":           1,
			"expset_group_lag{g}":               0,
			"expset_group_running{g}":           0,
			"expset_group_running_owners{g}":    0,
			"expset_group_lag{h}":               3,
			"expset_group_pending{h}":           0,
			"expset_group_retries_scheduled{h}": 0,
			"expset_group_dead_letters{h}":      0,
		})
		stop()
		// Stats is read before Groups: scrape again for the shards' view
		// of the state reached.
		got := gather(t, reg, name)
		if n := len(got); n != 14*4+10*2 {
			t.Errorf("%d samples, want 14 gauges x 4 shards + 10 gauges x 2 groups: %v", n, got)
		}
		retries, dead := sumShards(got, "expset_shard_retries_scheduled", 4), sumShards(got, "expset_shard_dead_letters", 4)
		if retries != 1 || dead != 1 {
			t.Errorf("over the shards: %v retries scheduled, %v dead letters; want 1 and 1", retries, dead)
		}
	})
}

// TestStatsCollectorWithoutEvents: a set without expiry events has no
// groups: a scrape gives its shard gauges and no error.
func TestStatsCollectorWithoutEvents(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		name := "prom-" + uuid.NewString()[:8]
		set, err := expset.Open(context.Background(), rdb, name, expset.WithShards(2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = expset.Drop(context.Background(), rdb, name) })
		reg := prometheus.NewRegistry()
		reg.MustRegister(expsetprom.NewStatsCollector(set))
		got := gather(t, reg, name)
		if len(got) != 14*2 {
			t.Errorf("%d samples, want 14 gauges x 2 shards: %v", len(got), got)
		}
	})
}

// TestStatsCollectorGroupsFail: a failed Set.Groups fails the scrape with
// an error naming the set, after the shard gauges Set.Stats gave; a group
// name that is not UTF-8 is quoted in its label.
func TestStatsCollectorGroupsFail(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	set, err := expset.Open(ctx, rdb, "orders", expset.WithShards(1), expset.WithExpiryEvents(), expset.WithConsumerGroups("\xffg"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(expsetprom.NewStatsCollector(set, expsetprom.WithNamespace("shop")))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("healthy gather: %v", err)
	}
	var labels []string
	for _, mf := range mfs {
		if mf.GetName() == "shop_group_lag" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "group" {
						labels = append(labels, l.GetValue())
					}
				}
			}
		}
	}
	if want := []string{`"\xffg"`}; !reflect.DeepEqual(labels, want) {
		t.Errorf("group labels %q, want %q", labels, want)
	}

	// The attempts hash's key of another type fails Groups, not Stats.
	st, err := set.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, st[0].EventsKey[:strings.LastIndexByte(st[0].EventsKey, ':')+1]+"att", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	mfs, err = reg.Gather()
	if err == nil || !strings.Contains(err.Error(), `"orders"`) || !strings.Contains(err.Error(), "shop_group_groups") {
		t.Fatalf("gather with Groups failing: %v; want an error naming the set", err)
	}
	shard := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "shop_shard_") {
			shard++
		}
		if strings.HasPrefix(mf.GetName(), "shop_group_") {
			t.Errorf("%s served although Groups failed", mf.GetName())
		}
	}
	if shard != 14 {
		t.Errorf("%d shard gauges served, want the 14 Stats gave", shard)
	}
}

// TestStatsCollectorPaused: a paused group reads 1 in expset_group_paused,
// and an owner paused in it counts in expset_group_paused_owners; both go
// back to 0 on Resume.
func TestStatsCollectorPaused(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		name := "prom-" + uuid.NewString()[:8]
		set, err := expset.Open(ctx, rdb, name, expset.WithShards(4), expset.WithExpiryEvents(), expset.WithConsumerGroups("g"))
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(expsetprom.NewStatsCollector(set))
		for _, owner := range []string{"", "tenant"} {
			if _, err := set.Pause(ctx, "g", owner); err != nil {
				t.Fatal(err)
			}
		}
		waitGauges(t, reg, name, "paused, one owner paused", map[string]float64{"expset_group_paused{g}": 1, "expset_group_paused_owners{g}": 1})
		for _, owner := range []string{"", "tenant"} {
			if _, err := set.Resume(ctx, "g", owner); err != nil {
				t.Fatal(err)
			}
		}
		waitGauges(t, reg, name, "resumed", map[string]float64{"expset_group_paused{g}": 0, "expset_group_paused_owners{g}": 0})
	})
}
