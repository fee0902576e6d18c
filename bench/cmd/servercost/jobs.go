package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
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

// sameBuckets returns, for each of ids, another ID in the same bucket of
// jobs of a default set (docs/jobs.md: FNV-1a of the ID picks the shard,
// then one of the shard's 8,192/16 buckets).
func sameBuckets(ids []string) []string {
	bucket := func(id string) uint32 {
		h := uint32(2166136261)
		for i := 0; i < len(id); i++ {
			h ^= uint32(id[i])
			h *= 16777619
		}
		return h%16*512 + h/16%512
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		want := bucket(id)
		for k := 0; ; k++ {
			if c := "seed-" + strconv.Itoa(i) + "-" + strconv.Itoa(k); bucket(c) == want {
				out[i] = c
				break
			}
		}
	}
	return out
}

// ownedBy returns the option that puts job i of a workload under owner
// user-<i> when owned, else none (nil: an option that does nothing).
func ownedBy(owned bool, i int) expset.JobOption {
	if !owned {
		return nil
	}
	return expset.WithOwner("user-" + strconv.Itoa(i))
}

// openJobs opens a set for jobs (WithExpiryEvents, WithPayloadStorage) and
// puts seed jobs with the 64-byte payload, due after delay (not counted),
// seed job i under owner user-<i> when owned. With once, the set's client
// never sends a call again (MaxRetries -1): the job calls then write no
// receipt.
func openJobs(ctx context.Context, e *env, seed []string, delay time.Duration, once, owned bool) (*expset.Set, error) {
	rdb := e.rdb
	if once {
		o := *e.rdb.Options()
		o.MaxRetries = -1
		rdb = redis.NewClient(&o)
	}
	s, err := expset.Open(ctx, rdb, setName, expset.WithExpiryEvents(), expset.WithPayloadStorage())
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
		_, put, err := s.Put(ctx, seed[i], delay, expset.WithPayload(jobPayload), ownedBy(owned, i))
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
	take, err := e.script("recipes/job-take.lua")
	if err != nil {
		return nil, err
	}
	bareKeys := []string{"bare:{" + setName + "}:jobs", "bare:{" + setName + "}:p"}
	// put measures Set.Put of new jobs due after delay, each (when owned)
	// of an owner of its own, user-<i>.
	put := func(name, what string, delay time.Duration, seeded, once, owned bool) workload {
		return workload{name: "job/" + name, unit: "call", vs: "recipe/job-put", what: what, prep: func(ctx context.Context, e *env) (job, error) {
			var seed []string
			if seeded && owned {
				seed = jobIDs("seed-", e.n)
			} else if seeded {
				seed = sameBuckets(jobIDs("job-", e.n))
			}
			// Seeded jobs are due first: each new one is not its bucket's
			// (its owner's) earliest.
			s, err := openJobs(ctx, e, seed, ttl/2, once, owned)
			if err == nil && delay == 0 {
				err = warmPutNow(ctx, s)
			}
			if err != nil {
				return job{}, err
			}
			ids := jobIDs("job-", e.n)
			return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
				_, put, err := s.Put(ctx, ids[i], delay, expset.WithPayload(jobPayload), ownedBy(owned, i))
				if err == nil && !put {
					err = fmt.Errorf("%s not put", ids[i])
				}
				return err
			}}, nil
		}}
	}
	onSeeded := func(name, what string, once bool, op func(ctx context.Context, s *expset.Set, id string) error) workload {
		return workload{name: "job/" + name, unit: "call", what: what, prep: func(ctx context.Context, e *env) (job, error) {
			ids := jobIDs("job-", e.n)
			s, err := openJobs(ctx, e, ids, ttl, once, false)
			if err != nil {
				return job{}, err
			}
			return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error { return op(ctx, s, ids[i]) }}, nil
		}}
	}
	cancel := func(ctx context.Context, s *expset.Set, id string) error {
		ok, err := s.Cancel(ctx, id)
		if err == nil && !ok {
			err = fmt.Errorf("%s not cancelled", id)
		}
		return err
	}
	return []workload{
		put("put", "Set.Put of a new job, 64-byte payload, in an empty set (most jobs their bucket's first)", ttl, false, false, false),
		put("put-now", "Set.Put of a new job due at once (delay 0: its event written at once), 64-byte payload", 0, false, false, false),
		put("put-more", "Set.Put of a new job, 64-byte payload, its bucket holding a job due earlier", ttl, true, false, false),
		put("put-more-once", "put-more by a client that never sends a call again (MaxRetries -1): no receipt", ttl, true, true, false),
		put("put-owned", "job/put WithOwner: each job its owner's first", ttl, false, false, true),
		put("put-owned-more", "job/put-more WithOwner: its owner holding a job due earlier", ttl, true, false, true),
		onSeeded("reschedule", "Set.Reschedule of a waiting job to twice its delay", false, func(ctx context.Context, s *expset.Set, id string) error {
			_, err := s.Reschedule(ctx, id, 2*ttl)
			return err
		}),
		onSeeded("reschedule-now", "Set.Reschedule of a waiting job to now (due at once)", false, func(ctx context.Context, s *expset.Set, id string) error {
			_, err := s.Reschedule(ctx, id, 0)
			return err
		}),
		onSeeded("cancel", "Set.Cancel of a waiting job with its payload", false, cancel),
		onSeeded("cancel-once", "job/cancel by a client that never sends a call again (MaxRetries -1): no receipt", true, cancel),
		{name: "recipe/job-put", unit: "call", vs: "recipe/job-put", what: "bare script: TIME, ZADD NX of the job, HSET of its payload (one sorted set and one hash for every job, no wake-up, no retry check)",
			prep: func(ctx context.Context, e *env) (job, error) {
				ids := jobIDs("job-", e.n)
				call := func(ctx context.Context, id string) error {
					n, err := bare.Run(ctx, e.rdb, bareKeys, ttl.Milliseconds(), id, jobPayload).Int64()
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
		{name: "job/sweep", unit: "job", what: "Sweeper.SweepOnce of e.n jobs due (64-byte payloads, most their bucket's only one) into events",
			prep: func(ctx context.Context, e *env) (job, error) {
				s, err := openJobs(ctx, e, jobIDs("job-", e.n), time.Millisecond, false, false)
				if err != nil {
					return job{}, err
				}
				w, err := expset.NewSweeper(s)
				if err != nil {
					return job{}, err
				}
				time.Sleep(2 * time.Millisecond)
				return job{calls: 1, units: e.n, do: func(ctx context.Context, _ int) error {
					st, err := w.SweepOnce(ctx)
					if err == nil && st.Expired != e.n {
						err = fmt.Errorf("swept %d jobs, want %d", st.Expired, e.n)
					}
					return err
				}}, nil
			}},
		jobLife("life", "a job's life: Set.Put (64-byte payload, due in 1 ms) + Sweeper.SweepOnce + Set.Consume (defaults, no-op handler), acknowledged", time.Millisecond),
		jobLife("life-c16", "job/life with Consume WithConcurrency(16): 16 handler calls at once", time.Millisecond, expset.WithConcurrency(16)),
		jobLife("life-now-c16", "job/life-c16 with Set.Put due at once (delay 0): its event written by the put, no sweep", 0, expset.WithConcurrency(16)),
		{name: "recipe/job-life", unit: "job", vs: "recipe/job-life", what: "the bare recipe's life: job-put.lua (due at once), then job-take.lua, 100 jobs a call, until all are taken (at most once)",
			prep: func(ctx context.Context, e *env) (job, error) {
				ids := jobIDs("job-", e.n)
				return job{calls: 1, units: e.n, do: func(ctx context.Context, _ int) error {
					err := run(ctx, e.goroutines, job{calls: e.n, do: func(ctx context.Context, i int) error {
						return bare.Run(ctx, e.rdb, bareKeys, 1, ids[i], jobPayload).Err()
					}})
					if err != nil {
						return err
					}
					time.Sleep(2 * time.Millisecond)
					for taken := 0; taken < e.n; {
						xs, err := take.Run(ctx, e.rdb, bareKeys, 100).Slice()
						if err != nil {
							return err
						}
						if len(xs) == 0 {
							return fmt.Errorf("took %d jobs, want %d", taken, e.n)
						}
						taken += len(xs) / 2
					}
					return nil
				}}, nil
			}},
	}, nil
}

// jobLife is a job's whole life, counted together: e.n jobs put (64-byte
// payload, due after delay) from the env's goroutines, swept into events by
// one Sweeper.SweepOnce (none with delay 0: the puts write the events),
// then handled (a no-op handler) and acknowledged by one Set.Consume with
// opts: instructions per job.
func jobLife(name, what string, delay time.Duration, opts ...expset.ConsumeOption) workload {
	return workload{name: "job/" + name, unit: "job", vs: "recipe/job-life", what: what,
		prep: func(ctx context.Context, e *env) (job, error) {
			s, err := openJobs(ctx, e, nil, 0, false, false)
			if err == nil && delay == 0 {
				err = warmPutNow(ctx, s)
			}
			if err != nil {
				return job{}, err
			}
			w, err := expset.NewSweeper(s)
			if err != nil {
				return job{}, err
			}
			ids := jobIDs("job-", e.n)
			return job{calls: 1, units: e.n, do: func(ctx context.Context, _ int) error {
				err := run(ctx, e.goroutines, job{calls: e.n, do: func(ctx context.Context, i int) error {
					_, _, err := s.Put(ctx, ids[i], delay, expset.WithPayload(jobPayload))
					return err
				}})
				if err != nil {
					return err
				}
				if delay > 0 {
					time.Sleep(delay + time.Millisecond)
					if _, err := w.SweepOnce(ctx); err != nil {
						return err
					}
				}
				return consumeAll(ctx, s, e.n, "jobs", opts...)
			}}, nil
		}}
}

// warmPutNow loads the script of a put due at once (and of the cancel of
// its event) before the count starts: a job put and cancelled.
func warmPutNow(ctx context.Context, s *expset.Set) error {
	if _, _, err := s.Put(ctx, "warm-up-now", 0, expset.WithPayload(jobPayload)); err != nil {
		return err
	}
	ok, err := s.Cancel(ctx, "warm-up-now")
	if err == nil && !ok {
		err = fmt.Errorf("warm-up-now not cancelled")
	}
	return err
}
