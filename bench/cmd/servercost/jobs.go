package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/expset/expset"
)

// jobPayload is the payload of every job put: 64 bytes, the largest a
// bucket's payload hash keeps compact by default.
var jobPayload = []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")

// jobIDs are the IDs of the jobs measured (job-<i>) and of those seeded
// before them (seed-<i>).
func jobIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	return ids
}

// openJobs opens a set for jobs (WithExpiryEvents, WithPayloadStorage) and
// puts seed jobs with the 64-byte payload, due after delay (not counted).
func openJobs(ctx context.Context, e *env, seed []string, delay time.Duration) (*expset.Set, error) {
	s, err := expset.Open(ctx, e.rdb, setName, expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		return nil, err
	}
	// The scripts are loaded before the count starts.
	if _, _, err := s.Put(ctx, "warm-up", time.Hour, expset.WithPayload(jobPayload)); err != nil {
		return nil, err
	}
	if _, err := s.Reschedule(ctx, "warm-up", 2*time.Hour); err != nil {
		return nil, err
	}
	if _, err := s.Cancel(ctx, "warm-up"); err != nil {
		return nil, err
	}
	err = run(ctx, e.goroutines, job{calls: len(seed), do: func(ctx context.Context, i int) error {
		_, put, err := s.Put(ctx, seed[i], delay, expset.WithPayload(jobPayload))
		if err == nil && !put {
			err = fmt.Errorf("seed %s not put", seed[i])
		}
		return err
	}})
	return s, err
}

// jobWorkloads are Set.Put, Set.Reschedule and Set.Cancel of jobs with a
// 64-byte payload on a default set (16 shards, 8,192 buckets), beside a
// bare recipe of the same put.
func jobWorkloads(e *env) ([]workload, error) {
	bare, err := e.script("recipes/job-put.lua")
	if err != nil {
		return nil, err
	}
	put := func(name, what string, seeded bool) workload {
		return workload{name: "job/" + name, unit: "call", vs: "recipe/job-put", what: what, prep: func(ctx context.Context, e *env) (job, error) {
			var seed []string
			if seeded {
				seed = jobIDs("seed-", e.n)
			}
			// Seeded jobs are due first: each new one is not its bucket's
			// earliest.
			s, err := openJobs(ctx, e, seed, ttl/2)
			if err != nil {
				return job{}, err
			}
			ids := jobIDs("job-", e.n)
			return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
				_, put, err := s.Put(ctx, ids[i], ttl, expset.WithPayload(jobPayload))
				if err == nil && !put {
					err = fmt.Errorf("%s not put", ids[i])
				}
				return err
			}}, nil
		}}
	}
	onSeeded := func(name, what string, op func(ctx context.Context, s *expset.Set, id string) error) workload {
		return workload{name: "job/" + name, unit: "call", what: what, prep: func(ctx context.Context, e *env) (job, error) {
			ids := jobIDs("job-", e.n)
			s, err := openJobs(ctx, e, ids, ttl)
			if err != nil {
				return job{}, err
			}
			return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error { return op(ctx, s, ids[i]) }}, nil
		}}
	}
	return []workload{
		put("put", "Set.Put of a new job, 64-byte payload, in an empty set (most jobs their bucket's first)", false),
		put("put-more", "Set.Put of a new job, 64-byte payload, its bucket holding jobs due earlier", true),
		onSeeded("reschedule", "Set.Reschedule of a waiting job to twice its delay", func(ctx context.Context, s *expset.Set, id string) error {
			_, err := s.Reschedule(ctx, id, 2*ttl)
			return err
		}),
		onSeeded("reschedule-now", "Set.Reschedule of a waiting job to now (due at once)", func(ctx context.Context, s *expset.Set, id string) error {
			_, err := s.Reschedule(ctx, id, 0)
			return err
		}),
		onSeeded("cancel", "Set.Cancel of a waiting job with its payload", func(ctx context.Context, s *expset.Set, id string) error {
			ok, err := s.Cancel(ctx, id)
			if err == nil && !ok {
				err = fmt.Errorf("%s not cancelled", id)
			}
			return err
		}),
		{name: "recipe/job-put", unit: "call", vs: "recipe/job-put", what: "bare script: TIME, ZADD NX of the job, HSET of its payload (one sorted set per shard, no wake-up, no retry check)",
			prep: func(ctx context.Context, e *env) (job, error) {
				ids := jobIDs("job-", e.n)
				var seq atomic.Int64
				call := func(ctx context.Context, id string) error {
					shard := strconv.FormatInt(seq.Add(1)%16, 10)
					tag := "bare:{" + setName + ":" + shard + "}:"
					n, err := bare.Run(ctx, e.rdb, []string{tag + "jobs", tag + "p"}, ttl.Milliseconds(), id, jobPayload).Int64()
					if err == nil && n != 1 {
						err = fmt.Errorf("%s not put", id)
					}
					return err
				}
				if err := call(ctx, "warm-up"); err != nil {
					return job{}, err
				}
				return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error { return call(ctx, ids[i]) }}, nil
			}},
	}, nil
}
