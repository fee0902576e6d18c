package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The operator's calls, apart from the everyday API: the recorded
// configuration (ReadConfiguration), Drop, Stats (with each shard's stream
// keys), dead letters (DeadLetters, Kick, DeleteDeadLetters), ReadEvents and
// OwnerKey, for tools such as the expset command.

// Configuration is what the first Open of a set recorded in Redis, in the
// hash expset:{name}:meta (HGETALL shows it: version 1, shards, and events,
// payloads and index as 0 or 1).
type Configuration struct {
	Shards   int
	Events   bool
	Payloads bool
	Index    bool // the due index is kept (always with Events)
}

// ReadConfiguration returns the configuration recorded for the set called
// name, or an error matching ErrNotFound when no set of that name was opened.
func ReadConfiguration(ctx context.Context, rdb redis.UniversalClient, name string) (Configuration, error) {
	if err := checkClient(rdb); err != nil {
		return Configuration{}, err
	}
	if err := validateName(name); err != nil {
		return Configuration{}, err
	}
	key := metaKey(name)
	fields, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return Configuration{}, fmt.Errorf("expset: read %s: %w", key, err)
	}
	if len(fields) == 0 {
		return Configuration{}, fmt.Errorf("%w: no set %q (%s is missing)", ErrNotFound, name, key)
	}
	return configurationFields(key, fields)
}

// metaVersion is the version of the key layout the meta hash records.
const metaVersion = "1"

// fields returns c as the field-value pairs of its meta hash.
func (c Configuration) fields() []any {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	return []any{"version", metaVersion, "shards", strconv.Itoa(c.Shards), "events", b(c.Events), "payloads", b(c.Payloads), "index", b(c.Index)}
}

// text describes c in errors.
func (c Configuration) text() string {
	return fmt.Sprintf("shards=%d events=%t payloads=%t index=%t", c.Shards, c.Events, c.Payloads, c.Index)
}

// recordedConfiguration reads the reply of open.lua: the fields of the meta
// hash.
func recordedConfiguration(key string, v any) (Configuration, error) {
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return Configuration{}, fmt.Errorf("%w: open.lua on %s answered %v", errUnexpectedReply, key, v)
	}
	fields := make(map[string]string, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		k, ok1 := xs[i].(string)
		val, ok2 := xs[i+1].(string)
		if !ok1 || !ok2 {
			return Configuration{}, fmt.Errorf("%w: open.lua on %s answered %v", errUnexpectedReply, key, v)
		}
		fields[k] = val
	}
	return configurationFields(key, fields)
}

// configurationFields reads the fields of a meta hash: exactly those that
// Configuration.fields writes, with values it could have written.
func configurationFields(key string, fields map[string]string) (Configuration, error) {
	var c Configuration
	n, err := strconv.Atoi(fields["shards"])
	c.Shards = n
	ok := fields["version"] == metaVersion && err == nil && n >= 1 && n <= maxShards && len(fields) == 5
	for name, dst := range map[string]*bool{"events": &c.Events, "payloads": &c.Payloads, "index": &c.Index} {
		v := fields[name]
		ok = ok && (v == "0" || v == "1")
		*dst = v == "1"
	}
	if !ok {
		return Configuration{}, fmt.Errorf("%w: %s holds %v, not a configuration of version %s", errUnexpectedReply, key, fields, metaVersion)
	}
	return c, nil
}

// Drop deletes every key of the set called name: its owners, payloads,
// indexes, event and dead-letter streams, leases and recorded configuration.
// It is meant for tests, demos and retiring a set, not for a set in use: a
// write racing with Drop may survive it. It returns how many keys it deleted.
// It deletes only the set's own keys, whatever its neighbours' names: the
// set "a:1", whose keys the patterns of "a" partly match, is left whole.
func Drop(ctx context.Context, rdb redis.UniversalClient, name string) (int, error) {
	cfg, err := ReadConfiguration(ctx, rdb, name)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	deleted := 0
	for shard := 0; shard < cfg.Shards; shard++ {
		pattern := keyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:*"
		keys, err := scanKeys(ctx, rdb, pattern)
		if err != nil {
			return deleted, err
		}
		sk := newShardKeys(name, shard)
		for _, k := range keys {
			if !sk.owns(k) {
				continue
			}
			n, err := rdb.Unlink(ctx, k).Result()
			if err != nil {
				return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
			}
			deleted += int(n)
		}
	}
	for _, k := range []string{sweepersKey(name), metaKey(name)} {
		n, err := rdb.Unlink(ctx, k).Result()
		if err != nil {
			return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
		}
		deleted += int(n)
	}
	return deleted, nil
}

// scanKeys lists the keys matching pattern, on every master of a cluster.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.Cmdable) ([]string, error) {
		var out []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("expset: scan %s: %w", pattern, err)
		}
		return out, nil
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var (
		out []string
		mu  sync.Mutex
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	return out, err
}

// optionsText renders Options as Go source: "WithShards(16),
// WithExpiryEvents()".
func (c Configuration) optionsText() string {
	out := "WithShards(" + strconv.Itoa(c.Shards) + ")"
	if c.Events {
		out += ", WithExpiryEvents()"
	}
	if c.Payloads {
		out += ", WithPayloadStorage()"
	}
	if c.Index && !c.Events {
		out += ", WithSweepIndex()"
	}
	return out
}

// recordedOptions returns the options that open a set with this
// configuration (WithRecordedConfiguration).
func (c Configuration) recordedOptions() []OpenOption {
	opts := []OpenOption{WithShards(c.Shards)}
	if c.Events {
		opts = append(opts, WithExpiryEvents())
	}
	if c.Payloads {
		opts = append(opts, WithPayloadStorage())
	}
	if c.Index && !c.Events {
		opts = append(opts, WithSweepIndex())
	}
	return opts
}

// statsOwnerScan is how many due owners of a shard Stats reads to count the
// members due; with more due, ShardStats.Partial is set.
const statsOwnerScan = 1000

// ShardStats describes one shard, for operators (the CLI's `expset stats`).
// A shard with 1200 owners indexed, 3 of them holding 7 expired members the
// sweeper has not reached yet, the oldest 2s overdue, reports Owners=1200,
// OwnersDue=3, MembersDue=7 and OldestDue two seconds before Now.
type ShardStats struct {
	Shard      int
	Now        time.Time // the "now" the numbers are taken at (server TIME or WithClock)
	Owners     int64     // owners in the due index: every owner with members, plus stale entries
	OwnersDue  int64     // index entries due now: owners the next sweep will visit
	MembersDue int64     // expired members not yet swept, counted over the first 1000 due owners
	Partial    bool      // more than 1000 owners are due: MembersDue counts only the first 1000's
	OldestDue  time.Time // the earliest deadline among those members; zero when none
	Events     int64     // expiry events in the stream: not yet handled, or pending
	Pending    int64     // events delivered and not yet acknowledged, over all consumer groups
	Dead       int64     // dead letters
	Retrying   int64     // events whose handler call failed, waiting for their retry delay (WithRetryBackoff, RetryAfter), over all consumer groups
	Trimmed    int64     // events retention removed before every group had them, ever (WithEventRetention)
	Leased     bool      // a Sweeper.Run's lease gives it the shard (any Run alive holds every shard)
	// EvictedKeys is the evicted_keys count (INFO stats) of the server that
	// holds the shard: keys of any kind its maxmemory-policy evicted since it
	// started. Anything above 0 on a server of this set's keys means lost
	// members (see WithEvictingServer); 0 where the server does not say.
	EvictedKeys int64

	EventsKey      string // the Redis key of the shard's expiry event stream
	DeadLettersKey string // the Redis key of the shard's dead-letter stream
}

// Stats returns the state of every shard. The numbers of one shard are read
// together but not atomically, and shards one after another: TIME (unless
// WithClock), a read of the sweeper registry, two pipelines (each one round
// trip per node on a cluster), a third for Retrying when a group has events
// pending (an XPENDING per shard and such group), then INFO stats once per
// server for EvictedKeys.
func (s *Set) Stats(ctx context.Context) ([]ShardStats, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	now, err := s.statsNow(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := s.sweepers(ctx, "", -1)
	if err != nil {
		return nil, fmt.Errorf("expset: stats of %q: %w", s.name, err)
	}
	nowArg := strconv.FormatInt(now, 10)
	type shardCmds struct {
		owners, ownersDue, events, dead *redis.IntCmd
		due                             *redis.StringSliceCmd
		trimmed                         *redis.StringCmd
	}
	cmds := make([]shardCmds, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		cmds[i] = shardCmds{
			owners:    pipe.ZCard(ctx, sk.due),
			ownersDue: pipe.ZCount(ctx, sk.due, "-inf", nowArg),
			due:       pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: sk.due, Start: "-inf", Stop: nowArg, ByScore: true, Count: statsOwnerScan}),
			events:    pipe.XLen(ctx, sk.events),
			dead:      pipe.XLen(ctx, sk.dead),
			trimmed:   pipe.Get(ctx, sk.trimmed),
		}
	}
	// A missing counter answers redis.Nil, which Exec may report instead of
	// another command's error: check each command.
	_, _ = pipe.Exec(ctx)
	for i := range cmds {
		c := &cmds[i]
		for _, cmd := range []redis.Cmder{c.owners, c.ownersDue, c.due, c.events, c.dead, c.trimmed} {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("expset: stats of %q: %w", s.name, err)
			}
		}
	}

	// Second round: members due of the due owners, and the groups' pending
	// counts of streams that exist.
	type ownerCmds struct {
		count *redis.IntCmd
		first *redis.ZSliceCmd
	}
	owners := make([][]ownerCmds, len(s.shards))
	groups := make([]*redis.XInfoGroupsCmd, len(s.shards))
	pipe = s.rdb.Pipeline()
	for i, sk := range s.shards {
		for _, o := range cmds[i].due.Val() {
			owners[i] = append(owners[i], ownerCmds{
				count: pipe.ZCount(ctx, sk.owner+o, "-inf", nowArg),
				first: pipe.ZRangeWithScores(ctx, sk.owner+o, 0, 0),
			})
		}
		groups[i] = pipe.XInfoGroups(ctx, sk.events)
	}
	_, _ = pipe.Exec(ctx) // a missing stream fails its XINFO: read per command

	evicted, err := s.evictedKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ShardStats, len(s.shards))
	var retrying []retryCount
	for i := range s.shards {
		st := ShardStats{
			Shard:     i,
			Now:       msTime(now),
			Owners:    cmds[i].owners.Val(),
			OwnersDue: cmds[i].ownersDue.Val(),
			Events:    cmds[i].events.Val(),
			Dead:      cmds[i].dead.Val(),
			Trimmed:   counter(cmds[i].trimmed),
			Leased:    holder(reg.tokens, i) != "",

			EvictedKeys: evicted[i],

			EventsKey:      s.shards[i].events,
			DeadLettersKey: s.shards[i].dead,
		}
		st.Partial = st.OwnersDue > statsOwnerScan
		for _, oc := range owners[i] {
			if err := oc.count.Err(); err != nil {
				return nil, fmt.Errorf("expset: stats of %q, shard %d (%s): %w", s.name, i, s.shards[i].due, err)
			}
			st.MembersDue += oc.count.Val()
			if z := oc.first.Val(); len(z) == 1 && int64(z[0].Score) <= now {
				if d := msTime(int64(z[0].Score)); st.OldestDue.IsZero() || d.Before(st.OldestDue) {
					st.OldestDue = d
				}
			}
		}
		out[i] = st
		if g := groups[i]; g.Err() == nil {
			for _, x := range g.Val() {
				out[i].Pending += x.Pending
				if x.Pending > 0 {
					retrying = append(retrying, retryCount{s.shards[i].events, x.Name, &out[i].Retrying})
				}
			}
		}
	}
	if err := s.countRetrying(ctx, retrying); err != nil {
		return nil, err
	}
	return out, nil
}

// counter reads a counter's GET: 0 when it does not exist (or holds
// something other than an integer).
func counter(c *redis.StringCmd) int64 {
	n, err := c.Int64()
	if err != nil {
		return 0
	}
	return n
}

// statsNow returns now in ms: the set's clock, or the server's TIME.
func (s *Set) statsNow(ctx context.Context) (int64, error) {
	if s.clock != nil {
		return s.clock().UnixMilli(), nil
	}
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("expset: stats of %q: %w", s.name, err)
	}
	return t.UnixMilli(), nil
}

// DeadLetter is an expiry event that failed every attempt Consume allowed
// (WithMaxAttempts) and now waits in its shard's dead-letter stream until it
// is kicked back (Kick) or deleted (DeleteDeadLetters).
type DeadLetter struct {
	Shard    int
	ID       string    // the dead letter's ID in the shard's dead-letter stream
	Event    Expiry    // the event; Attempt is the number of deliveries it had, ID its former ID
	Group    string    // the consumer group that gave up on it
	Consumer string    // the consumer that buried it
	Error    string    // the last handler error, or why it was never acknowledged
	Buried   time.Time // when it was buried (the server's clock), to the millisecond
}

// DeadLetters returns up to count dead letters (count <= 0: all) of one
// shard, or of every shard with shard -1, oldest first within a shard and
// in shard order.
func (s *Set) DeadLetters(ctx context.Context, shard, count int) ([]DeadLetter, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	lo, hi, err := s.shardRange(shard)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for i := lo; i < hi; i++ {
		left := int64(count - len(out))
		if count > 0 && left <= 0 {
			break
		}
		key := s.shards[i].dead
		var msgs []redis.XMessage
		if count > 0 {
			msgs, err = s.rdb.XRangeN(ctx, key, "-", "+", left).Result()
		} else {
			msgs, err = s.rdb.XRange(ctx, key, "-", "+").Result()
		}
		if err != nil {
			return out, fmt.Errorf("expset: read %s: %w", key, err)
		}
		for _, m := range msgs {
			d, err := parseDeadLetter(i, m)
			if err != nil {
				return out, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *Set) shardRange(shard int) (lo, hi int, err error) {
	switch {
	case shard == allShards:
		return 0, len(s.shards), nil
	case shard < 0 || shard >= len(s.shards):
		return 0, 0, fmt.Errorf("%w: shard %d (want 0 to %d, or -1 for all)", ErrInvalidArgument, shard, len(s.shards)-1)
	}
	return shard, shard + 1, nil
}

func parseDeadLetter(shard int, m redis.XMessage) (DeadLetter, error) {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	a, err := strconv.Atoi(str("a"))
	if err != nil {
		return DeadLetter{}, fmt.Errorf("%w: malformed dead letter %s: %v", errUnexpectedReply, m.ID, m.Values)
	}
	e, err := parseExpiry(shard, redis.XMessage{ID: str("id"), Values: m.Values}, a)
	if err != nil {
		return DeadLetter{}, err
	}
	d := DeadLetter{Shard: shard, ID: m.ID, Event: e, Group: str("g"), Consumer: str("c"), Error: str("err")}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			d.Buried = msTime(n)
		}
	}
	return d, nil
}

// Kick puts dead letters back on their shards' event streams as fresh
// events, delivered again from attempt 1, and removes them from the
// dead-letter streams, each in one step. It returns how many it found and
// kicked (a dead letter already kicked or deleted is not counted).
func (s *Set) Kick(ctx context.Context, letters ...DeadLetter) (int, error) {
	return s.eachDeadShard(ctx, letters, func(ctx context.Context, sk *shardKeys, ids []any) (int64, error) {
		v, err := s.run(ctx, "kick", sk.shard, scriptKick, []string{sk.dead, sk.events}, ids...)
		if err != nil {
			return 0, err
		}
		n, ok := asInt64(v)
		if !ok {
			return 0, unexpected("kick.lua", v)
		}
		return n, nil
	})
}

// DeleteDeadLetters deletes dead letters for good and returns how many it
// found.
func (s *Set) DeleteDeadLetters(ctx context.Context, letters ...DeadLetter) (int, error) {
	return s.eachDeadShard(ctx, letters, func(ctx context.Context, sk *shardKeys, ids []any) (int64, error) {
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = id.(string)
		}
		n, err := s.rdb.XDel(ctx, sk.dead, strs...).Result()
		if err != nil {
			return 0, fmt.Errorf("expset: delete from %s: %w", sk.dead, err)
		}
		return n, nil
	})
}

// eachDeadShard groups letters by shard and calls fn with at most maxBatch
// IDs at a time, adding up what it returns.
func (s *Set) eachDeadShard(ctx context.Context, letters []DeadLetter, fn func(context.Context, *shardKeys, []any) (int64, error)) (int, error) {
	if err := s.opened(); err != nil {
		return 0, err
	}
	byShard := map[int][]any{}
	var order []int
	for _, d := range letters {
		if _, _, err := s.shardRange(d.Shard); err != nil || d.Shard == allShards {
			return 0, fmt.Errorf("%w: dead letter %s of shard %d", ErrInvalidArgument, d.ID, d.Shard)
		}
		if !validStreamID(d.ID) {
			return 0, fmt.Errorf("%w: dead letter ID %q of shard %d is not a stream ID (ms-seq)", ErrInvalidArgument, d.ID, d.Shard)
		}
		if _, seen := byShard[d.Shard]; !seen {
			order = append(order, d.Shard)
		}
		byShard[d.Shard] = append(byShard[d.Shard], d.ID)
	}
	total := 0
	for _, shard := range order {
		ids := byShard[shard]
		for len(ids) > 0 {
			batch := ids[:min(len(ids), maxBatch)]
			ids = ids[len(batch):]
			n, err := fn(ctx, &s.shards[shard], batch)
			total += int(n)
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// validStreamID reports whether id is a complete Redis stream ID, "ms-seq"
// with both parts unsigned 64-bit decimals, so that a malformed one is
// rejected before any shard is touched.
func validStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}

// OwnerKey returns the Redis key of owner's sorted set, for operators and
// tools that read it directly ("" for a zero or nil Set).
func (s *Set) OwnerKey(owner string) string {
	if s.Shards() == 0 {
		return ""
	}
	return s.shards[s.ShardOf(owner)].owner + owner
}

// ReadEvents returns up to count expiry events (1 to 1000) of one shard's
// stream whose IDs come after after, and the ID to pass as after next time.
// It only reads (XREAD, outside any consumer group): nothing is delivered,
// claimed or acknowledged, so a tool watching the stream (expset events tail)
// takes nothing from the consumers. after "$" starts after the newest event
// the stream holds now; "0-0" starts at its oldest. With block over zero it
// waits up to block (at least 1ms) for an event when there is none yet,
// holding a connection meanwhile; with zero it returns at once. The events
// returned have Attempt 0: they were not delivered. A malformed entry ends the
// read with an "expset: unexpected reply" error, the events before it, and an ID past it.
//
// An event leaves its stream once every consumer group has handled it: a
// read that does not wait may miss an event handled in between. A reader blocked in ReadEvents when an
// event is written gets it before any other command runs.
func (s *Set) ReadEvents(ctx context.Context, shard int, after string, count int, block time.Duration) ([]Expiry, string, error) {
	if err := s.opened(); err != nil {
		return nil, after, err
	}
	if !s.events {
		return nil, after, fmt.Errorf("%w: set %q has no expiry events: open it WithExpiryEvents to read them", ErrInvalidArgument, s.name)
	}
	if _, _, err := s.shardRange(shard); err != nil || shard == allShards {
		return nil, after, fmt.Errorf("%w: shard %d (want 0 to %d)", ErrInvalidArgument, shard, len(s.shards)-1)
	}
	if after != "$" && after != "0" && !validStreamID(after) {
		return nil, after, fmt.Errorf("%w: after %q: want \"$\", \"0\" or a stream ID (ms-seq)", ErrInvalidArgument, after)
	}
	if count < 1 || count > maxBatch {
		return nil, after, fmt.Errorf("%w: count %d (want 1 to %d)", ErrInvalidArgument, count, maxBatch)
	}
	key := s.shards[shard].events
	if after == "$" {
		last, err := s.rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return nil, after, fmt.Errorf("expset: read %s: %w", key, err)
		}
		after = "0-0"
		if len(last) == 1 {
			after = last[0].ID
		}
	}
	args := &redis.XReadArgs{Streams: []string{key, after}, Count: int64(count), Block: -1}
	if block > 0 {
		args.Block = max(block, time.Millisecond) // BLOCK 0 would wait forever
	}
	res, err := s.rdb.XRead(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, fmt.Errorf("expset: read %s: %w", key, err)
	}
	var out []Expiry
	for _, st := range res {
		for _, m := range st.Messages {
			after = m.ID
			e, err := parseExpiry(shard, m, 0)
			if err != nil {
				return out, after, err
			}
			out = append(out, e)
		}
	}
	return out, after, nil
}
