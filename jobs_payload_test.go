package expset

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// jobPayloadSizes are payload sizes on both sides of the server's
// hash-max-listpack-value (64 bytes by default), past which a bucket's
// payload hash is no longer one compact list, and large ones up to the
// 1 MiB limit.
var jobPayloadSizes = []int{0, 1, 63, 64, 65, 200, 4000, 70_000, maxPayloadLen}

// jobPayload returns a payload of n bytes holding every byte value.
func jobPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + n)
	}
	return p
}

// eachJobSet runs fn on every backend, in parallel with other tests and
// checked for goroutines left behind, with the jobs' tests' set: two
// shards, expiry events, payloads and consumer group "g", on a fake
// clock.
func eachJobSet(t *testing.T, fn func(t *testing.T, b backend, s *Set, clk *fakeClock)) {
	t.Helper()
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("g"))
		fn(t, b, s, clk)
	})
}

// recordJobs consumes s's group "g" as consumer "c" with opts until stop
// (or the test's end), recording every event handled.
func recordJobs(t *testing.T, s *Set, opts ...ConsumeOption) (rec *recorder, stop func()) {
	t.Helper()
	rec = &recorder{}
	return rec, consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error { rec.add(e); return nil }, opts...)
}

// jobKeysLeft returns the keys of s that hold waiting jobs: its buckets
// and owners, their payloads, and the due index.
func jobKeysLeft(t *testing.T, s *Set) []string {
	t.Helper()
	var left []string
	for _, k := range setKeys(t, s.rdb, s.name) {
		for _, sk := range s.shards {
			if strings.HasPrefix(k, sk.Owner) || strings.HasPrefix(k, sk.Payload) || k == sk.Due && indexLen(t, s.rdb, k) > 0 {
				left = append(left, k)
			}
		}
	}
	return left
}

// TestJobPayloadSizes: payloads of every size in jobPayloadSizes go
// through Put, Job, Reschedule and the sweeper to Consume byte for byte,
// and Cancel of waiting jobs leaves the set's keys as they were before the
// Puts, with no field or member of theirs behind (but the calls' receipts,
// which lapse, and the buckets' entries in the due index, which the
// sweeper takes out); once every job is delivered no bucket, payload hash
// or due index is left.
func TestJobPayloadSizes(t *testing.T) {
	eachJobSet(t, func(t *testing.T, b backend, s *Set, clk *fakeClock) {
		ctx := context.Background()
		t0 := clk.Now()
		put := func(id string, n int, delay time.Duration) {
			t.Helper()
			if due, ok, err := s.Put(ctx, id, delay, WithPayload(jobPayload(n))); err != nil || !ok || !due.Equal(t0.Add(delay)) {
				t.Fatalf("Put %s: %v %v %v", id, due, ok, err)
			}
		}

		before := snapshot(t, b.rdb, s.name)
		for _, n := range jobPayloadSizes {
			put(fmt.Sprintf("cancel-%d", n), n, time.Minute)
		}
		for _, n := range jobPayloadSizes {
			id := fmt.Sprintf("cancel-%d", n)
			if ok := must[bool](t)(s.Cancel(ctx, id)); !ok {
				t.Fatalf("Cancel %s: false", id)
			}
			if j := must[Job](t)(s.Job(ctx, id)); j != (Job{}) {
				t.Fatalf("Job %s after Cancel: %+v", id, j)
			}
		}
		after := snapshot(t, b.rdb, s.name)
		for k := range after {
			// The calls' receipts (jobReceiptMillis) lapse by themselves.
			if strings.Contains(k, "}:r:#") {
				if ttl := b.rdb.PTTL(ctx, k).Val(); ttl <= 0 {
					t.Errorf("receipt %s without a TTL (%v)", k, ttl)
				}
				delete(after, k)
			}
			// The buckets' index entries stay for the sweeper (see
			// cancel_waiting.lua), which takes them out when due.
			if strings.HasSuffix(k, "}:due") {
				for _, o := range b.rdb.ZRange(ctx, k, 0, -1).Val() {
					if !isJobOwner(o) {
						t.Errorf("due index %s holds %q", k, o)
					}
				}
				delete(after, k)
				delete(before, k)
			}
		}
		if !maps.Equal(before, after) {
			t.Fatalf("keys after every job was cancelled:\n%v\nwant those before the Puts:\n%v", after, before)
		}

		want := map[string][]byte{}
		dues := map[string]time.Time{}
		for _, n := range jobPayloadSizes {
			id := fmt.Sprintf("put-%d", n)
			put(id, n, time.Minute)
			want[id], dues[id] = jobPayload(n), t0.Add(time.Minute)
			moved := fmt.Sprintf("moved-%d", n)
			put(moved, n, time.Minute)
			if d := must[time.Time](t)(s.Reschedule(ctx, moved, 2*time.Minute)); !d.Equal(t0.Add(2 * time.Minute)) {
				t.Fatalf("Reschedule %s: %v", moved, d)
			}
			want[moved], dues[moved] = jobPayload(n), t0.Add(2*time.Minute)
		}
		for id, due := range dues {
			if j := must[Job](t)(s.Job(ctx, id)); j != (Job{State: "waiting", Due: due}) {
				t.Fatalf("Job %s: %+v, want waiting until %v", id, j, due)
			}
		}

		r, _ := recordJobs(t, s, fastConsume...)
		w := newSweeper(t, s)
		check := func(prefix string) {
			t.Helper()
			clk.Advance(time.Minute)
			must[SweepStats](t)(w.SweepOnce(ctx))
			waitFor(t, prefix+" jobs delivered", func() bool { return r.len() == len(jobPayloadSizes) })
			// Acknowledged before the clock moves on: no lease runs out
			// under a call that has finished.
			waitFor(t, prefix+" jobs acknowledged", func() bool {
				gs := must[[]GroupInfo](t)(s.Groups(ctx))
				return len(gs) == 1 && gs[0].Lag == 0 && gs[0].Pending == 0
			})
			for _, e := range r.events() {
				if e.Owner != "" || !strings.HasPrefix(e.Member, prefix) || !e.Deadline.Equal(dues[e.Member]) || !bytes.Equal(e.Payload, want[e.Member]) {
					t.Fatalf("delivered %s (owner %q, due %v) with %d payload bytes, want a %s job due %v with its %d bytes",
						e.Member, e.Owner, e.Deadline, len(e.Payload), prefix, dues[e.Member], len(want[e.Member]))
				}
			}
			r.mu.Lock()
			r.got = nil
			r.mu.Unlock()
		}
		check("put-")
		check("moved-")
		if left := jobKeysLeft(t, s); left != nil {
			t.Errorf("%q left once every job was delivered", left)
		}
	})
}
