package expsetprom_test

import (
	"context"
	"strconv"
	"strings"
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

// gather collects reg into name{shard} -> value, for the set's samples.
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
			got[mf.GetName()+"{"+labels["shard"]+"}"] = m.GetGauge().GetValue()
		}
	}
	return got
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
		if len(got) != 12*4 {
			t.Errorf("%d samples, want 12 gauges x 4 shards: %v", len(got), got)
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
		var events, membersDue float64
		for shard := 0; shard < 4; shard++ {
			events += got["expset_shard_events{"+strconv.Itoa(shard)+"}"]
			membersDue += got["expset_shard_members_due{"+strconv.Itoa(shard)+"}"]
		}
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
