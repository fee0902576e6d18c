package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/barestream"
)

// consumeGroup is the consumer group the consume workloads read as.
const consumeGroup = "bench"

// consumeWorkload is one Set.Consume, with a handler that does nothing, of
// the events of e.n owners' expired members (swept in prep, not counted):
// instructions per event handled, reads, begins, acknowledgements and the
// consumer's shutdown included; WithoutSweeper, so that no sweeper of its
// own runs beside it (every workload here measures one path). groups are declared besides consumeGroup
// (none consume: each event then stays until they do).
func consumeWorkload(name, what string, groups []string, opts ...expset.ConsumeOption) workload {
	return retryWorkload(name, what, groups, 0, opts...)
}

// retryWorkload is consumeWorkload with a handler whose first call of each
// event fails with RetryAfter(err, delay) (none with delay 0): the
// instructions per event then include one retry, its claim and the second
// call.
func retryWorkload(name, what string, groups []string, delay time.Duration, opts ...expset.ConsumeOption) workload {
	return workload{name: "consume/" + name, unit: "event", vs: "consume/bare", what: what,
		prep: func(ctx context.Context, e *env) (job, error) {
			s, n, err := seedEvents(ctx, e, groups)
			if err != nil {
				return job{}, err
			}
			return job{calls: 1, units: n, do: func(ctx context.Context, _ int) error {
				var handled atomic.Int64
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				err := s.Consume(cctx, consumeGroup, "c1", func(_ context.Context, e expset.Expiry) error {
					if delay > 0 && e.Attempt == 1 {
						return expset.RetryAfter(errFirst, delay)
					}
					if handled.Add(1) == int64(n) {
						cancel()
					}
					return nil
				}, append(opts, expset.WithoutSweeper())...)
				if err == nil && handled.Load() != int64(n) {
					err = fmt.Errorf("handled %d events, want %d", handled.Load(), n)
				}
				return err
			}}, nil
		}}
}

// consumeAll runs one Set.Consume of s, with a handler that does nothing
// and no sweeper of its own (the workload sweeps itself), until it has
// handled n events (what names them in the error when it stops short).
func consumeAll(ctx context.Context, s *expset.Set, n int, what string, opts ...expset.ConsumeOption) error {
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := s.Consume(cctx, consumeGroup, "c1", func(context.Context, expset.Expiry) error {
		if handled.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, append(opts, expset.WithoutSweeper())...)
	if err == nil && handled.Load() != int64(n) {
		err = fmt.Errorf("handled %d %s, want %d", handled.Load(), what, n)
	}
	return err
}

// reserveWorkload is a loop of Set.Reserve and Reservation.Finish(nil) per
// event, from the env's goroutines at once under one consumer name.
func reserveWorkload() workload {
	return workload{name: "consume/reserve", unit: "event", vs: "consume/bare",
		what: "Set.Reserve then Reservation.Finish(nil) per event, the env's goroutines at once, one consumer name",
		prep: func(ctx context.Context, e *env) (job, error) {
			s, n, err := seedEvents(ctx, e, nil)
			if err != nil {
				return job{}, err
			}
			return job{calls: n, units: n, do: func(ctx context.Context, _ int) error {
				r, err := s.Reserve(ctx, consumeGroup, "c1", expset.WithoutSweeper())
				if err != nil {
					return err
				}
				return r.Finish(ctx, nil)
			}}, nil
		}}
}

// errFirst fails the first call of each event of a retry workload.
var errFirst = errors.New("first call")

// bareConsumeWorkload is the floor for the same work written directly: one
// pipelined XREADGROUP (COUNT 100) of every shard's stream, then XACK and
// XDEL of what was read, until every event is read.
func bareConsumeWorkload() workload {
	return workload{name: "consume/bare", unit: "event",
		what: "bare loop: pipelined XREADGROUP COUNT 100 of every shard, then XACK + XDEL of what was read",
		prep: func(ctx context.Context, e *env) (job, error) {
			s, n, err := seedEvents(ctx, e, nil)
			if err != nil {
				return job{}, err
			}
			streams, err := barestream.Streams(ctx, e.rdb, s.Name(), s.Shards(), consumeGroup)
			if err != nil {
				return job{}, err
			}
			return job{calls: 1, units: n, do: func(ctx context.Context, _ int) error {
				return barestream.Consume(ctx, e.rdb, streams, consumeGroup, n)
			}}, nil
		}}
}

// seedEvents opens a set with expiry events (and groups declared), gives
// e.n owners one expired member each and sweeps them into events; it
// returns the set and the number of events.
func seedEvents(ctx context.Context, e *env, groups []string) (*expset.Set, int, error) {
	opts := []expset.OpenOption{expset.WithExpiryEvents()}
	if len(groups) > 0 {
		opts = append(opts, expset.WithConsumerGroups(append([]string{consumeGroup}, groups...)...))
	}
	s, err := expset.Open(ctx, e.rdb, setName, opts...)
	if err != nil {
		return nil, 0, err
	}
	owners, err := seedExpired(ctx, e, s, 1, true)
	if err != nil {
		return nil, 0, err
	}
	w, err := expset.NewSweeper(s)
	if err != nil {
		return nil, 0, err
	}
	st, err := w.SweepOnce(ctx)
	if err != nil {
		return nil, 0, err
	}
	if st.Expired != len(owners) {
		return nil, 0, fmt.Errorf("swept %d members, want %d", st.Expired, len(owners))
	}
	return s, st.Expired, nil
}

// consumeWorkloads are the bare floor and Consume with its defaults, with
// WithReadBatch(100), WithConcurrency(16), owner caps, a second group
// declared (fan-out: each event stays for it), retries, and Reserve.
func consumeWorkloads() []workload {
	return []workload{
		bareConsumeWorkload(),
		consumeWorkload("defaults", "Set.Consume, defaults (WithReadBatch 10), no-op handler", nil),
		consumeWorkload("batch100", "Set.Consume, WithReadBatch(100), no-op handler", nil, expset.WithReadBatch(100)),
		consumeWorkload("concurrency16", "Set.Consume, WithConcurrency(16), no-op handler", nil, expset.WithConcurrency(16)),
		consumeWorkload("owner-cap", "Set.Consume, WithOwnerConcurrency(1), one event per owner (none refused): the owner slots' cost", nil, expset.WithOwnerConcurrency(1)),
		consumeWorkload("owner-cap2", "Set.Consume, WithOwnerConcurrency(2), one event per owner (none refused)", nil, expset.WithOwnerConcurrency(2)),
		consumeWorkload("owner-cap2-c16", "Set.Consume, WithOwnerConcurrency(2) and WithConcurrency(16), one event per owner (none refused)", nil,
			expset.WithOwnerConcurrency(2), expset.WithConcurrency(16)),
		reserveWorkload(),
		consumeWorkload("fan-out", "Set.Consume, defaults, a second group declared and not consuming", []string{"other"}),
		retryWorkload("retry", "Set.Consume, defaults, each event's first call fails with RetryAfter 1ms: one retry per event", nil, time.Millisecond),
		retryWorkload("retry-long", "Set.Consume, WithLeaseTTL(1s), each event's first call fails with RetryAfter 1.5s (past the lease TTL: held again once)", nil,
			1500*time.Millisecond, expset.WithLeaseTTL(time.Second)),
	}
}
