package store

import (
	"context"
	"fmt"
)

// acquire_many.go serves acquire_many.lua: Quota.AcquireMany's batches.

// manyPerCall is the most requests one acquire_many.lua call runs.
const manyPerCall = 100

// manyCall builds the acquire_many.lua call of the requests idx (all of
// shard) of reqs: each request's own acquire.lua keys and arguments, after
// their counts.
func (s *Store) manyCall(shard int, reqs []Acquire, idx []int) *Call {
	calls := make([]*Call, len(idx))
	nk, na := 0, 1
	for j, i := range idx {
		calls[j] = s.acquireCall(reqs[i])
		nk += len(calls[j].Keys)
		na += 2 + len(calls[j].Args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, na)
	args = append(args, s.now())
	for _, c := range calls {
		keys = append(keys, c.Keys...)
		args = append(args, len(c.Keys), len(c.Args))
		args = append(args, c.Args...)
	}
	return &Call{Op: "acquire-many", Shard: shard, Script: scriptMany, Keys: keys, Args: args}
}

// readMany reads the reply of c, an acquire_many.lua call that sent the
// requests idx of reqs: done gets the decision or the error of each of the
// first ran of them. err is the call's own error, or an unexpected-reply
// error when its reply cannot be read (ran is then 0).
func (s *Store) readMany(c *Call, reqs []Acquire, idx []int, done func(i int, d Decision, err error)) (ran int, err error) {
	if c.Err != nil {
		return 0, c.Err
	}
	xs, ok := c.Reply.([]any)
	if !ok || len(xs) == 0 || len(xs) > len(idx) {
		return 0, Unexpected("acquire_many.lua", c.Reply)
	}
	for j, x := range xs {
		i := idx[j]
		if rerr, ok := x.(error); ok {
			done(i, Decision{}, fmt.Errorf("expset: acquire %s: %w", s.OwnerKey(reqs[i].Owner), rerr))
			continue
		}
		d, derr := decided(&Call{Reply: x, Durable: c.Durable}, reqs[i].Limit)
		done(i, d, derr)
	}
	return len(xs), nil
}

// AcquireMany runs reqs by acquire_many.lua: the requests of one shard in
// order, at most manyPerCall a call, one call per shard in each round trip
// (RunWrites), and a call that stops early (it moved as much as it may)
// followed by one with its remaining requests. done gets, for each request,
// its decision or its error: a call that failed as a whole, or whose reply
// cannot be read, gives its error to each of its requests, which are not
// sent again.
func (s *Store) AcquireMany(ctx context.Context, reqs []Acquire, done func(i int, d Decision, err error)) {
	// The requests of each shard, in order, still to run.
	pending := make(map[int][]int)
	var shards []int
	for i, r := range reqs {
		sh := s.ShardOf(r.Owner)
		if _, ok := pending[sh]; !ok {
			shards = append(shards, sh)
		}
		pending[sh] = append(pending[sh], i)
	}
	for len(shards) > 0 {
		batch := make([]*Call, len(shards))
		for j, sh := range shards {
			batch[j] = s.manyCall(sh, reqs, pending[sh][:min(len(pending[sh]), manyPerCall)])
		}
		s.RunWrites(ctx, batch, true, func(*Call) bool { return true })
		next := shards[:0]
		for j, sh := range shards {
			sent := pending[sh][:min(len(pending[sh]), manyPerCall)]
			ran, err := s.readMany(batch[j], reqs, sent, done)
			if err != nil {
				// The call failed as a whole, or its reply cannot be read:
				// what it did is unknown, and it is not sent again.
				for _, i := range pending[sh][ran:] {
					done(i, Decision{}, err)
				}
				continue
			}
			if pending[sh] = pending[sh][ran:]; len(pending[sh]) > 0 {
				next = append(next, sh)
			}
		}
		shards = next
	}
}
