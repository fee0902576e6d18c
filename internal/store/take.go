package store

import "fmt"

// take.go serves take.lua: new events of one shard read and begun in one
// step, reading past the events of owners at their cap (Set.Consume
// WithOwnerConcurrency).

// TakeArgs is one take.lua call's own arguments.
type TakeArgs struct {
	Shard  int
	Read   int      // the most entries to read (len(Tokens) to MaxBatch)
	First  int      // how many entries the first read takes (len(Tokens) to Read)
	Tokens []string // one per call that may be begun (1 to MaxBatch): the i-th call begun gets the i-th
}

// Taken is one entry of take.lua's reply.
type Taken struct {
	ID     string
	Values map[string]any // the entry's fields
	// Attempt is the call's attempt number when begun (> 0); else 0 (not
	// meant for the group, or not an event: the consumer settles it),
	// BeginFull (set aside) or ReadAhead.
	Attempt int
	Full    bool   // the call took its owner's last free slot
	Token   string // the token of its call, when begun
}

// Took is take.lua's reply.
type Took struct {
	Read    int     // the entries the reply holds, well formed or not
	Entries []Taken // in stream order, up to the first malformed one
	// Malformed is ErrUnexpectedReply for an entry of the wrong shape
	// (the entries after it are left out), else nil.
	Malformed error
}

// TakeCall builds take.lua's call for c (whose OwnerCap is above 0) and a.
func (s *Store) TakeCall(c Consumer, a TakeArgs) *Call {
	sk := &s.shards[a.Shard]
	keys := []string{sk.Events, sk.Att, sk.Take, sk.Run, sk.Runo}
	args := make([]any, 0, 7+len(a.Tokens))
	args = append(args, c.Group, c.Name, len(a.Tokens), c.OwnerCap, a.Read, c.leaseMs(), a.First)
	for _, t := range a.Tokens {
		args = append(args, t)
	}
	return &Call{Op: "take", Shard: a.Shard, Script: scriptTakeSlots, Keys: keys, Args: args}
}

// ReadTake reads the reply of c, a take.lua call sent with tokens. The
// error, "expset: read <stream>: ...", is the call's or ErrUnexpectedReply
// for a reply that is not a list; an entry of the wrong shape, or one more
// begun than tokens sent, is Took.Malformed.
func ReadTake(c *Call, tokens []string) (Took, error) {
	err := c.Err
	entries, ok := c.Reply.([]any)
	if err == nil && !ok {
		err = Unexpected("take.lua", c.Reply)
	}
	if err != nil {
		return Took{}, fmt.Errorf("expset: read %s: %w", c.Keys[0], err)
	}
	t := Took{Read: len(entries)}
	begun := 0
	for _, v := range entries {
		e, ok := readTaken(v)
		if ok && e.Attempt > 0 {
			if begun >= len(tokens) {
				ok = false
			} else {
				e.Token = tokens[begun]
				begun++
			}
		}
		if !ok {
			t.Malformed = Unexpected("take.lua", c.Reply)
			break
		}
		t.Entries = append(t.Entries, e)
	}
	return t, nil
}

// readTaken reads one {id, {field, value, ...}, attempt, full} of
// take.lua's reply.
func readTaken(v any) (Taken, bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 4 {
		return Taken{}, false
	}
	id, ok1 := String(e[0])
	values, ok2 := fieldMap(e[1])
	n, ok3 := Int64(e[2])
	f, ok4 := Int64(e[3])
	return Taken{ID: id, Values: values, Attempt: int(n), Full: f == 1}, ok1 && ok2 && ok3 && ok4
}
