package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// A recipeState is what each owner holds before a recipe runs, and the
// reply each call must give.
type recipeState struct {
	name  string
	held  int  // members of seedNames held
	retry bool // the owner holds the member itself
}

var (
	stFresh  = recipeState{name: "fresh"}
	stLive   = recipeState{name: "live", held: 1}
	stRetry  = recipeState{name: "retry", retry: true}
	stDenied = recipeState{name: "denied", held: 3}
)

// recipeCall makes one call of a recipe for owner key and member and
// returns its reply as an integer.
type recipeCall func(ctx context.Context, rdb *redis.Client, key, member string) (int64, error)

// recipeWorkloads are the alternatives written in the project's own words
// (bench/testdata/recipes), on a bare sorted set per owner under the same
// key names as expset's owner keys, limit 3, ttl 1 minute.
func recipeWorkloads(e *env) ([]workload, error) {
	straight, err := e.script("recipes/straightforward.lua")
	if err != nil {
		return nil, err
	}
	three, err := e.script("recipes/three-call.lua")
	if err != nil {
		return nil, err
	}
	setAdd, err := e.script("recipes/set-ttl-add.lua")
	if err != nil {
		return nil, err
	}
	ms := ttl.Milliseconds()
	deadline := func() string { return strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10) }
	type recipe struct {
		name, what string
		call       recipeCall
		states     map[recipeState]int64 // the reply each state must give
	}
	recipes := []recipe{
		{"zadd", "raw ZADD (the floor for one write)", func(ctx context.Context, rdb *redis.Client, key, member string) (int64, error) {
			return rdb.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(ttl).UnixMilli()), Member: member}).Result()
		}, map[recipeState]int64{stFresh: 1, stLive: 1}},
		{"straightforward", "script: TIME, ZREMRANGEBYSCORE, ZSCORE, ZCARD, ZADD, PEXPIREAT", func(ctx context.Context, rdb *redis.Client, key, member string) (int64, error) {
			return straight.Run(ctx, rdb, []string{key}, limit, ms, member).Int64()
		}, map[recipeState]int64{stFresh: 1, stLive: 1, stRetry: 2, stDenied: 0}},
		{"three-call", "script: ZREMRANGEBYSCORE, ZCARD, ZADD (app clock, no key TTL, no retry check)", func(ctx context.Context, rdb *redis.Client, key, member string) (int64, error) {
			return three.Run(ctx, rdb, []string{key}, strconv.FormatInt(time.Now().UnixMilli(), 10), deadline(), limit, member).Int64()
		}, map[recipeState]int64{stFresh: 1, stLive: 1, stDenied: 0}},
		{"set-ttl-add", "script: ZSCORE, ZADD (no cap at all)", func(ctx context.Context, rdb *redis.Client, key, member string) (int64, error) {
			return setAdd.Run(ctx, rdb, []string{key}, deadline(), member).Int64()
		}, map[recipeState]int64{stFresh: 1, stRetry: 0}},
	}
	var out []workload
	for _, r := range recipes {
		for _, st := range []recipeState{stFresh, stLive, stRetry, stDenied} {
			want, ok := r.states[st]
			if !ok {
				continue
			}
			out = append(out, workload{name: "recipe/" + r.name + "/" + st.name, unit: "call", vs: "recipe/straightforward/" + st.name,
				what: r.what, prep: recipePrep(st, r.call, want)})
		}
	}
	return out, nil
}

func recipePrep(st recipeState, call recipeCall, want int64) func(ctx context.Context, e *env) (job, error) {
	return func(ctx context.Context, e *env) (job, error) {
		s, err := expset.Open(context.Background(), e.rdb, setName)
		if err != nil {
			return job{}, err
		}
		d := time.Now().Add(ttl)
		switch {
		case st.retry:
			err = seedOf(ctx, e.rdb, s, e.owners, func(i int) []string { return []string{e.members[i]} }, d, true, false)
		case st.held > 0:
			err = seed(ctx, e.rdb, s, e.owners, seedNames[:st.held], d, true, false)
		}
		if err != nil {
			return job{}, err
		}
		if _, err := call(ctx, e.rdb, s.OwnerKey("warm-up"), "m"); err != nil {
			return job{}, err
		}
		return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
			got, err := call(ctx, e.rdb, s.OwnerKey(e.owners[i]), e.members[i])
			if err == nil && got != want {
				err = fmt.Errorf("reply %d, want %d", got, want)
			}
			return err
		}}, nil
	}
}
