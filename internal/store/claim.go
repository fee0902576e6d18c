package store

import "context"

// claim.go serves claim.lua: events left pending longer than the lease TTL
// taken over, and those with every attempt used buried (Set.Consume,
// Set.Reserve).

// ClaimArgs is one claim.lua call's own arguments.
type ClaimArgs struct {
	Shard  int
	Cursor string // where the scan of the pending list starts ("0-0": its start)
	Count  int    // the most entries to claim
	Reason string // the text of a buried entry's dead letter
}

// ClaimedEntry is one entry claim.lua claimed or buried.
type ClaimedEntry struct {
	ID     string
	Used   int  // attempts used
	Buried bool // buried now, with every attempt used
	Values map[string]any
}

// Claimed is claim.lua's reply.
type Claimed struct {
	Cursor  string // where the next scan starts ("0-0" once the whole list was scanned)
	Entries []ClaimedEntry
	// Malformed is ErrUnexpectedReply for an entry of the wrong shape
	// (the entries after it are left out), else nil.
	Malformed error
}

// claimCall builds claim.lua's call for c and a.
func (s *Store) claimCall(c Consumer, a ClaimArgs) *Call {
	sk := &s.shards[a.Shard]
	args := []any{c.Group, c.Name, c.leaseMs(), a.Cursor, a.Count, c.MaxAttempts, a.Reason}
	return &Call{Op: "claim", Shard: a.Shard, Script: scriptClaim, Keys: []string{sk.Events, sk.Dead, sk.Att, sk.Runo}, Args: args}
}

// readClaim reads claim.lua's reply: {cursor, {id, attempts used, buried
// (0/1), {field, value, ...}}...}. It fails when there is no cursor; an
// entry of the wrong shape is Claimed.Malformed.
func readClaim(v any) (Claimed, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) < 1 {
		return Claimed{}, Unexpected("claim.lua", v)
	}
	cursor, ok := String(xs[0])
	if !ok {
		return Claimed{}, Unexpected("claim.lua", v)
	}
	r := Claimed{Cursor: cursor}
	for _, x := range xs[1:] {
		e, ok := readClaimed(x)
		if !ok {
			r.Malformed = Unexpected("claim.lua", v)
			break
		}
		r.Entries = append(r.Entries, e)
	}
	return r, nil
}

// readClaimed reads one {id, attempts used, buried, {field, value, ...}}
// of claim.lua's reply.
func readClaimed(v any) (ClaimedEntry, bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 4 {
		return ClaimedEntry{}, false
	}
	id, ok1 := String(e[0])
	n, ok2 := Int64(e[1])
	b, ok3 := Int64(e[2])
	values, ok4 := fieldMap(e[3])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return ClaimedEntry{}, false
	}
	return ClaimedEntry{ID: id, Used: int(n), Buried: b == 1, Values: values}, true
}

// Claim runs claim.lua for c and a. Its error is the call's (NOGROUP when
// the stream or the group is missing: IsNoGroup) or ErrUnexpectedReply.
func (s *Store) Claim(ctx context.Context, c Consumer, a ClaimArgs) (Claimed, error) {
	v, err := s.run(ctx, s.claimCall(c, a))
	if err != nil {
		return Claimed{}, err
	}
	return readClaim(v)
}
