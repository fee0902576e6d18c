package expset

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
)

func TestReadEventsTakesNothingFromConsumers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		shard := s.ShardOf("o0")
		evs, from, err := s.ReadEvents(ctx, shard, "$", 10, 0)
		if err != nil || len(evs) != 0 || from != "0-0" {
			t.Fatalf("empty stream: %v %q %v", evs, from, err)
		}
		expire(t, s, clk, 1) // o0/m
		evs, next, err := s.ReadEvents(ctx, shard, from, 10, 0)
		if err != nil || len(evs) != 1 {
			t.Fatalf("read: %v %v", evs, err)
		}
		if e := evs[0]; e.Owner != "o0" || e.Member != "m" || string(e.Payload) != "p0" || e.Attempt != 0 || e.Shard != shard || e.ID != next {
			t.Fatalf("event %+v, next %q", e, next)
		}
		if evs, _, err := s.ReadEvents(ctx, shard, next, 10, 0); err != nil || len(evs) != 0 {
			t.Fatalf("after the last: %v %v", evs, err)
		}
		if _, now, err := s.ReadEvents(ctx, shard, "$", 10, 0); err != nil || now != next {
			t.Fatalf(`"$" = %q, want %q (%v)`, now, next, err)
		}

		// The group still gets the event the read saw.
		var rec recorder
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error { rec.add(e); return nil }, fastConsume...)
		waitFor(t, "the event", func() bool { return rec.len() == 1 })
		stop()

		for _, bad := range []struct {
			shard, count int
		}{{-1, 1}, {2, 1}, {0, 0}, {0, 1001}} {
			if _, _, err := s.ReadEvents(ctx, bad.shard, "0-0", bad.count, 0); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("shard %d count %d: %v", bad.shard, bad.count, err)
			}
		}
		st := must[[]ShardStats](t)(s.Stats(ctx))
		if k := st[1].EventsKey; k != "expset:{"+s.Name()+":1}:ev" || st[1].DeadLettersKey != "expset:{"+s.Name()+":1}:dead" {
			t.Errorf("keys %q %q", k, st[1].DeadLettersKey)
		}
		plain, _ := newTestSet(t, b)
		if _, _, err := plain.ReadEvents(ctx, 0, "$", 1, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("no events: %v", err)
		}
	})
}

func TestReadEventsBlocks(t *testing.T) {
	t.Parallel()
	b := backend{name: "redis", rdb: redistest.Client(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
	got := make(chan []Expiry, 1)
	ready := make(chan string, 1)
	go func() {
		_, from, err := s.ReadEvents(ctx, 0, "$", 10, 0)
		ready <- from
		var evs []Expiry
		for err == nil && len(evs) == 0 && ctx.Err() == nil {
			evs, from, err = s.ReadEvents(ctx, 0, from, 10, 100*time.Millisecond)
		}
		got <- evs
	}()
	<-ready
	expire(t, s, clk, 1)
	select {
	case evs := <-got:
		if len(evs) != 1 || evs[0].Owner != "o0" {
			t.Fatalf("blocked read got %+v", evs)
		}
	case <-ctx.Done():
		t.Fatal("a blocked read did not see the event in 30s")
	}
}
