package expsetprom_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/expset/expset/expsetprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// TestScrape drives a set with the collector's hooks and scrapes the
// registry over HTTP, as Prometheus would.
func TestScrape(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	c := expsetprom.NewCollector()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	set, err := expset.Open(context.Background(), rdb, "orders", expset.WithHooks(c.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := expset.NewQuota(set, 1, expset.WithEvictOldest())
	q2, _ := expset.NewQuota(set, 1)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.Acquire(ctx, "u", "a", time.Minute))
	must(q.Acquire(ctx, "u", "a", time.Minute))  // existing
	must(q2.Acquire(ctx, "u", "b", time.Minute)) // denied
	must(q.Acquire(ctx, "u", "c", time.Minute))  // admitted, evicts a
	must(set.Count(ctx, "u"))
	sweep := expset.CallInfo{Set: "orders", Op: "sweep"}
	c.Hooks().OnSweep(context.Background(), sweep, expset.SweepStats{Batches: 1, Owners: 3, Expired: 5, MaxLateness: 20 * time.Millisecond, Trimmed: 2})
	c.Hooks().OnSweep(context.Background(), sweep, expset.SweepStats{Trimmed: 4}) // a call that only trimmed: no batch
	c.Hooks().OnError(context.Background(), expset.CallInfo{Set: "orders", Op: "sweep", Shard: 1, Err: io.EOF}, time.Second)
	c.Hooks().OnEvent(context.Background(), expset.CallInfo{Set: "orders", Op: "event"}, expset.EventInfo{Attempt: 1})
	c.Hooks().OnEvent(context.Background(), expset.CallInfo{Set: "orders", Op: "event", Err: io.EOF}, expset.EventInfo{Attempt: 5, DeadLettered: true})
	c.Hooks().OnWait(context.Background(), expset.CallInfo{Set: "orders", Op: "wait", Duration: 30 * time.Millisecond})
	c.Hooks().OnWait(context.Background(), expset.CallInfo{Set: "orders", Op: "wait", Duration: 2 * time.Second, Err: context.Canceled})
	c.Hooks().OnWait(context.Background(), expset.CallInfo{Set: "orders", Op: "wait", Duration: time.Second, Err: context.DeadlineExceeded})

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	for _, want := range []string{
		`expset_acquire_total{outcome="admitted",set="orders"} 2`,
		`expset_acquire_total{outcome="existing",set="orders"} 1`,
		`expset_acquire_total{outcome="denied",set="orders"} 1`,
		`expset_evicted_total{set="orders"} 1`,
		`expset_calls_total{op="acquire",result="ok",set="orders"} 4`,
		`expset_calls_total{op="count",result="ok",set="orders"} 1`,
		`expset_call_duration_seconds_count{op="acquire",set="orders"} 4`,
		`expset_swept_members_total{set="orders"} 5`,
		`expset_swept_owners_total{set="orders"} 3`,
		`expset_sweep_batches_total{set="orders"} 1`,
		`expset_sweep_lateness_seconds_count{set="orders"} 1`,
		`expset_event_attempts_total{result="ok",set="orders"} 1`,
		`expset_event_attempts_total{result="dead_lettered",set="orders"} 1`,
		`expset_wait_seconds_count{outcome="admitted",set="orders"} 1`,
		`expset_wait_seconds_count{outcome="given_up",set="orders"} 2`,
		`expset_wait_seconds_sum{outcome="given_up",set="orders"} 3`,
		`expset_events_trimmed_total{set="orders"} 6`,
		`expset_loop_errors_total{op="sweep",set="orders"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}
