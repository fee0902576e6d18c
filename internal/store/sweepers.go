package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// sweepers.go serves sweepers.lua: the sweeper registry's leases
// (Sweeper.Run, SweepOnce, Set.Stats).

// sweepersCall builds sweepers.lua's call: ttl > 0 joins or renews token's
// lease, ttl 0 leaves, ttl < 0 only reads.
func (s *Store) sweepersCall(token string, ttl time.Duration) *Call {
	arg := ""
	if ttl >= 0 {
		arg = fmt.Sprint(ttl.Milliseconds())
	}
	return &Call{Op: "lease", Shard: -1, Script: scriptSweepers, Keys: []string{SweepersKey(s.name)}, Args: []any{token, arg}}
}

// Registry is one reply of sweepers.lua.
type Registry struct {
	Now    int64    // the server's TIME, ms
	Joined bool     // the caller's entry was not there
	Tokens []string // the live sweepers, sorted
	First  int64    // the earliest lease end of the others (ms, server TIME); 0 when none
}

// readSweepers reads sweepers.lua's reply to the call of token: {now,
// joined, token, lease end, ...}.
func readSweepers(v any, token string) (Registry, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) < 2 || len(xs)%2 != 0 {
		return Registry{}, Unexpected("sweepers.lua", v)
	}
	var r Registry
	var joined int64
	r.Now, ok = Int64(xs[0])
	joined, ok2 := Int64(xs[1])
	if !ok || !ok2 {
		return Registry{}, Unexpected("sweepers.lua", v)
	}
	r.Joined = joined == 1
	for i := 2; i < len(xs); i += 2 {
		tok, ok := String(xs[i])
		end, ok2 := Int64(xs[i+1])
		if !ok || !ok2 {
			return Registry{}, Unexpected("sweepers.lua", v)
		}
		r.Tokens = append(r.Tokens, tok)
		if tok != token && (r.First == 0 || end < r.First) {
			r.First = end
		}
	}
	slices.Sort(r.Tokens)
	return r, nil
}

// Sweepers runs sweepers.lua: ttl > 0 joins or renews token's lease, ttl 0
// leaves, ttl < 0 only reads. One round trip.
func (s *Store) Sweepers(ctx context.Context, token string, ttl time.Duration) (Registry, error) {
	v, err := s.run(ctx, s.sweepersCall(token, ttl))
	if err != nil {
		return Registry{}, err
	}
	return readSweepers(v, token)
}
