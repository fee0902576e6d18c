package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// newTestStore opens a set of a fresh name with events, payloads and the
// due index on rdb, recording the operations OnCall sees; the set's keys
// are dropped when the test ends.
func newTestStore(t *testing.T, rdb redis.UniversalClient, shards int) (*Store, func() []string) {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "st" + hex.EncodeToString(b[:])
	ctx := context.Background()
	want := Config{Shards: shards, Events: true, Payloads: true, Index: true}
	if got, err := Open(ctx, rdb, name, want); err != nil || got != want {
		t.Fatalf("Open: %+v %v, want %+v", got, err, want)
	}
	var (
		mu  sync.Mutex
		ops []string
	)
	s := New(rdb, name, Options{Shards: shards, Events: true, Payloads: true, Index: true,
		OnCall: func(_ context.Context, op string, _ int, _ time.Duration, _ error) {
			mu.Lock()
			ops = append(ops, op)
			mu.Unlock()
		}})
	t.Cleanup(func() {
		if _, err := Drop(context.Background(), rdb, name, shards); err != nil {
			t.Errorf("Drop: %v", err)
		}
	})
	return s, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(ops) }
}

// TestStoreOwnerScripts runs the owner scripts on every backend.
func TestStoreOwnerScripts(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, ops := newTestStore(t, rdb, 4)
		if c, found, err := ReadConfig(ctx, rdb, s.name); err != nil || !found || c.Shards != 4 {
			t.Fatalf("ReadConfig: %+v %v %v", c, found, err)
		}
		d, _, err := s.Add(ctx, "u", "a", 60_000, []byte("pay"), true)
		if err != nil || d.IsZero() {
			t.Fatalf("Add: %v %v", d, err)
		}
		dec, err := s.Acquire(ctx, Acquire{Owner: "u", Member: "b", TTL: 60_000, Limit: 2})
		if err != nil || !dec.Allowed || dec.Count != 2 {
			t.Fatalf("Acquire: %+v %v", dec, err)
		}
		if dec, err = s.Acquire(ctx, Acquire{Owner: "u", Member: "c", TTL: 60_000, Limit: 2}); err != nil || dec.Allowed {
			t.Fatalf("Acquire over the limit: %+v %v", dec, err)
		}
		if n, err := s.Count(ctx, "u"); err != nil || n != 2 {
			t.Fatalf("Count: %d %v", n, err)
		}
		if ms, err := s.Members(ctx, "u", 0); err != nil || len(ms) != 2 || ms[0].ID != "a" {
			t.Fatalf("Members: %+v %v", ms, err)
		}
		if p, found, err := s.Payload(ctx, "u", "a"); err != nil || !found || string(p) != "pay" {
			t.Fatalf("Payload: %q %v %v", p, found, err)
		}
		if _, found, err := s.Deadline(ctx, "u", "zz"); err != nil || found {
			t.Fatalf("Deadline of a member absent: %v %v", found, err)
		}
		if e, found, err := s.Extend(ctx, "u", "a", 120_000); err != nil || !found || !e.After(d) {
			t.Fatalf("Extend: %v %v %v", e, found, err)
		}
		if n, err := s.Remove(ctx, "u", []string{"a", "b", "zz"}); err != nil || n != 2 {
			t.Fatalf("Remove: %d %v", n, err)
		}
		want := []string{"add", "acquire", "acquire", "count", "members", "payload", "deadline", "extend", "remove"}
		if got := ops(); !slices.Equal(got, want) {
			t.Fatalf("OnCall saw %v, want %v", got, want)
		}
	})
}

// TestStoreJobsAndSweep puts jobs, sweeps the one due into an event, and
// reads the events and the sweeper registry, on every backend.
func TestStoreJobsAndSweep(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 2)
		if _, put, _, err := s.Put(ctx, "", "now", 1, nil, false); err != nil || !put {
			t.Fatalf("Put: %v %v", put, err)
		}
		if _, put, _, err := s.Put(ctx, "", "later", 3_600_000, nil, false); err != nil || !put {
			t.Fatalf("Put: %v %v", put, err)
		}
		if st, err := s.Job(ctx, "", "later"); err != nil || st.State != "waiting" {
			t.Fatalf("Job: %+v %v", st, err)
		}
		if ok, err := s.Cancel(ctx, "", "later"); err != nil || !ok {
			t.Fatalf("Cancel: %v %v", ok, err)
		}
		if _, found, _, err := s.Reschedule(ctx, "", "later", 1); err != nil || found {
			t.Fatalf("Reschedule of a job cancelled: %v %v", found, err)
		}
		shard, _ := s.JobBucket("now")
		time.Sleep(2 * time.Millisecond)
		a := SweepArgs{Shard: shard, Members: 100, PerRound: 100, MaxAge: time.Hour, MaxLen: 1000, MaxBytes: 1 << 30}
		var expired int
		for i := 0; i < 5; i++ {
			r, err := s.Sweep(ctx, a)
			if err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			expired += r.Expired
			if len(r.Due) == 0 {
				break
			}
			a.Owners = r.Due
		}
		if expired != 1 {
			t.Fatalf("swept %d, want the one job due", expired)
		}
		msgs, after, err := s.ReadEvents(ctx, shard, "0", 10, 0)
		if err != nil || len(msgs) != 1 || after != msgs[0].ID {
			t.Fatalf("ReadEvents: %v %q %v", msgs, after, err)
		}
		if err := s.DeclareGroups(ctx, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		gs, err := s.Groups(ctx)
		if err != nil || len(gs[shard]) != 1 || gs[shard][0].Lag != 1 {
			t.Fatalf("Groups: %+v %v", gs, err)
		}
		reg, err := s.Sweepers(ctx, "tok", time.Minute)
		if err != nil || !reg.Joined || !slices.Equal(reg.Tokens, []string{"tok"}) {
			t.Fatalf("Sweepers: %+v %v", reg, err)
		}
		counts, err := s.Counts(ctx, time.Now().UnixMilli())
		if err != nil || counts[shard].Events != 1 {
			t.Fatalf("Counts: %+v %v", counts, err)
		}
	})
}
