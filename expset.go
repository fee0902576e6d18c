// Package expset keeps bounded pending sets on Redis: per-owner sets whose
// members each expire on their own deadline, with caps enforced atomically.
//
// A Set is one Redis sorted set per owner (a user, an account): the member is
// the pending item's ID, the score its deadline in Unix milliseconds taken
// from Redis's own clock. Expired members are invisible to every read at once,
// whether or not anything has removed them yet. A Quota caps how many live
// members an owner may hold ("at most 3 unpaid orders per user") with one Lua
// script per admission, so concurrent requests can never over-admit. A Sweeper
// reclaims expired members and, with WithExpiryEvents, turns each expiry into
// a durable event read with Set.Consume.
//
// Every script declares all its keys, and the keys one script touches share a
// hash tag, so the same code runs on a single Redis and on Redis Cluster.
package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// Set is a named family of per-owner expiring sets. What it stores is in
// Redis; in memory it keeps its configuration and, for this process only,
// what its Reserve calls share between calls (one wake-up subscription,
// each consumer's place in the shards), the retries its consumers
// scheduled, so that a consumer of the group claims each when it is due,
// and the sweeper its consumers run (see WithoutSweeper).
// It is safe for simultaneous use by multiple goroutines, and any number
// of processes may open the same name with the same options. The zero
// value is not usable; create one with Open.
// A zero or nil *Set's methods fail with ErrInvalidArgument (those that return
// no error give "", 0 or -1) instead of panicking.
type Set struct {
	rdb        redis.UniversalClient
	st         *store.Store // the set's keys, scripts and reads
	name       string
	shards     []store.Keys // st.Shards()
	clock      func() time.Time
	events     bool
	payloads   bool
	index      bool // the due index is kept: events, or WithSweepIndex
	hooks      Hooks
	groups     []string     // consumer groups declared with WithConsumerGroups
	errLog     *errorLog    // the default report of errors the loops survive
	waiting    waitRoom     // this process's waiters (Quota.AcquireWait)
	reserves   reservers    // this process's Reserve calls (reserve.go)
	retryNotes retryBoard   // the retries this process schedules, for its consumers (retry.go)
	finishes   ackCommit    // the acknowledgements of Reservation.Finish (settle.go)
	sweeping   ownSweeper   // the sweeper this process's consumers run (ownsweeper.go)
	pubsub     atomic.Int32 // pubsubUnknown, pubsubSharded or pubsubPlain (notify.go)
	// dropWake, set by tests only, drops the wake-ups of the channels it
	// returns true for, as a lost notification would.
	dropWake func(channel string) bool
}

// Member is a live member and its deadline.
type Member struct {
	ID       string
	Deadline time.Time
}

// msTime is the instant ms milliseconds after the Unix epoch.
func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// Open validates the options, checks the server, then records the set's
// configuration (shard count, expiry events, payloads) in Redis the first
// time the name is opened, or checks it against what is recorded. A
// different configuration fails with ErrConfigMismatch: opening a set with
// another shard count would orphan its data.
//
// The check reads the server's version once (HELLO, or INFO server when HELLO
// is refused; on a ClusterClient every master, on a Ring every shard) and
// fails with ErrServerVersion, before any script runs, when a server is older
// than Redis 7.0 (or Valkey 7.2). It then reads INFO once per server and
// fails with ErrNotDurable when a server's maxmemory-policy may evict keys
// (see WithEvictingServer, which skips this read) or cannot give what
// WithDurability asks. Open makes three round trips (two more per extra
// master); the Set it returns makes none until used and never checks again.
func Open(ctx context.Context, rdb redis.UniversalClient, name string, opts ...OpenOption) (*Set, error) {
	if err := checkClient(rdb); err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	cfg := setConfig{shards: defaultShards}
	if err := applyOptions(opts, &cfg, OpenOption.applyOpen); err != nil {
		return nil, err
	}
	if cfg.recorded {
		rc, err := ReadConfiguration(ctx, rdb, name)
		if err != nil {
			return nil, err
		}
		// What is recorded, then what the caller gave: a recorded setting
		// given otherwise fails below with ErrConfigMismatch.
		cfg = setConfig{shards: defaultShards}
		if err := applyOptions(append(rc.recordedOptions(), opts...), &cfg, OpenOption.applyOpen); err != nil {
			return nil, err
		}
	}
	if len(cfg.groups) > 0 && !cfg.events {
		return nil, fmt.Errorf("%w: WithConsumerGroups needs WithExpiryEvents", ErrInvalidArgument)
	}
	if err := checkDurableClient(rdb, cfg.durable); err != nil {
		return nil, err
	}
	s := &Set{rdb: rdb, name: name, clock: cfg.clock, events: cfg.events, payloads: cfg.payloads, hooks: cfg.hooks,
		groups: slices.Compact(slices.Sorted(slices.Values(cfg.groups))), errLog: &errorLog{logger: cfg.logger}}
	s.index = cfg.events || cfg.index
	s.st = store.New(rdb, name, store.Options{Shards: cfg.shards, Events: s.events, Payloads: s.payloads, Index: s.index,
		Clock: cfg.clock, Durable: cfg.durable, OnCall: s.onCall()})
	s.shards = s.st.Shards()

	if err := checkServers(ctx, rdb, name); err != nil {
		return nil, err
	}
	if err := checkServerConfig(ctx, rdb, name, &cfg); err != nil {
		return nil, err
	}
	want := Configuration{Shards: cfg.shards, Events: s.events, Payloads: s.payloads, Index: s.index}
	got, err := store.Open(ctx, rdb, name, store.Config(want))
	if err != nil {
		return nil, err
	}
	if Configuration(got) != want {
		return nil, mismatch(name, store.MetaKey(name), Configuration(got), want)
	}
	if s.events {
		if err := s.st.AnchorIndexes(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.declareGroups(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// mismatch is the ErrConfigMismatch error of Open: what is recorded, what
// was asked, and how to open the set as recorded.
func mismatch(name, key string, got, want Configuration) error {
	return fmt.Errorf("%w: set %q was first opened with %s (recorded in %s), not %s: open it with %s, or WithRecordedConfiguration, which reads them",
		ErrConfigMismatch, name, got.text(), key, want.text(), got.optionsText())
}

// opened returns ErrInvalidArgument for a nil or zero Set.
func (s *Set) opened() error {
	if s == nil || len(s.shards) == 0 || s.rdb == nil || s.st == nil {
		return fmt.Errorf("%w: zero or nil *Set: create it with Open", ErrInvalidArgument)
	}
	return nil
}

// checkClient rejects a nil client: a nil interface, or a nil *redis.Client,
// *redis.ClusterClient or *redis.Ring in it (whose methods would panic).
func checkClient(rdb redis.UniversalClient) error {
	isNil := false
	switch c := rdb.(type) {
	case nil:
		isNil = true
	case *redis.Client:
		isNil = c == nil
	case *redis.ClusterClient:
		isNil = c == nil
	case *redis.Ring:
		isNil = c == nil
	}
	if isNil {
		return fmt.Errorf("%w: nil Redis client", ErrInvalidArgument)
	}
	return nil
}

// Name returns the set's name ("" for a nil Set).
func (s *Set) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Shards returns the number of shards the owners are spread over (0 for a
// zero or nil Set).
func (s *Set) Shards() int {
	if s == nil {
		return 0
	}
	return len(s.shards)
}

// ShardOf returns the shard that holds owner (0 to Shards()-1; -1 for a
// zero or nil Set).
func (s *Set) ShardOf(owner string) int {
	if s.Shards() == 0 {
		return -1
	}
	return store.ShardOf(owner, len(s.shards))
}

func ttlMillis(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond || ttl > maxTTL {
		return 0, fmt.Errorf("%w: ttl %v (want 1ms to %v; sub-millisecond parts are dropped)", ErrInvalidArgument, ttl, maxTTL)
	}
	return ttl.Milliseconds(), nil
}

// callOptions applies the options of one Add or Acquire with apply and
// checks the payload against the set.
func callOptions[O any](s *Set, opts []O, apply func(O, *callConfig) error) (callConfig, error) {
	var c callConfig
	if err := applyOptions(opts, &c, apply); err != nil {
		return c, err
	}
	if c.hasPayload {
		if !s.payloads {
			return c, fmt.Errorf("%w: WithPayload: set %q was opened without WithPayloadStorage: open it with it to store payloads", ErrInvalidArgument, s.name)
		}
		if len(c.payload) > maxPayloadLen {
			return c, fmt.Errorf("%w: WithPayload: payload of %d bytes (at most %d)", ErrInvalidArgument, len(c.payload), maxPayloadLen)
		}
	}
	return c, nil
}

func (s *Set) checkOwner(owner string) error {
	if err := s.opened(); err != nil {
		return err
	}
	return validateOwner(owner)
}

func (s *Set) checkOwnerMember(owner, member string) error {
	if err := s.opened(); err != nil {
		return err
	}
	if err := validateOwner(owner); err != nil {
		return err
	}
	return validateMember(member)
}

// onCall returns the store's report of every script run to Hooks.OnCall,
// nil when the hook is not set.
func (s *Set) onCall() store.OnCall {
	if s.hooks.OnCall == nil {
		return nil
	}
	return func(ctx context.Context, op string, shard int, took time.Duration, err error) {
		s.hooks.OnCall(ctx, CallInfo{Set: s.name, Op: op, Shard: shard, Duration: took, Err: err})
	}
}

// Add puts member into owner's set with the deadline now+ttl, replacing the
// deadline of a member already there (an upsert, which may also move a
// deadline earlier), and returns the deadline. Owners have no cap here; see
// Quota for that. Expired members of the owner found on the way are removed
// (with their expiry events). ttl is truncated to whole milliseconds and must
// be 1ms to 100 years. Options: WithPayload.
//
// On a set WithDurability, Add then waits for the acknowledgements asked
// (in the script's round trip, up to the option's timeout: see
// WithDurability); when they do not all
// come, it returns the deadline together with an error matching
// ErrNotDurable: the member is in the set, on the master only.
func (s *Set) Add(ctx context.Context, owner, member string, ttl time.Duration, opts ...AddOption) (time.Time, error) {
	if err := s.checkOwnerMember(owner, member); err != nil {
		return time.Time{}, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return time.Time{}, err
	}
	c, err := callOptions(s, opts, AddOption.applyAdd)
	if err != nil {
		return time.Time{}, err
	}
	d, durable, err := s.st.Add(ctx, owner, member, ms, c.payload, c.hasPayload)
	if err != nil {
		return time.Time{}, err
	}
	if dur := s.st.Durable(); dur.On() && !durable {
		return d, fmt.Errorf("%w: add %s: %s", ErrNotDurable, s.st.OwnerKey(owner), dur.Shortfall())
	}
	return d, nil
}

// Remove deletes members from owner's set and returns how many live members it
// removed. Members already expired are not counted: they expired first, and
// with expiry events they produce their event. Each batch of up to 1000
// members (fewer when their payloads pass about 1 MiB) is removed
// atomically; more are removed in several steps.
func (s *Set) Remove(ctx context.Context, owner string, members ...string) (int, error) {
	if err := s.checkOwner(owner); err != nil {
		return 0, err
	}
	for _, m := range members {
		if err := validateMember(m); err != nil {
			return 0, err
		}
	}
	return s.st.Remove(ctx, owner, members)
}

// Contains reports whether member is live in owner's set.
func (s *Set) Contains(ctx context.Context, owner, member string) (bool, error) {
	_, err := s.Deadline(ctx, owner, member)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Deadline returns a live member's deadline, or an error matching ErrNotFound
// when the member is absent or expired.
func (s *Set) Deadline(ctx context.Context, owner, member string) (time.Time, error) {
	if err := s.checkOwnerMember(owner, member); err != nil {
		return time.Time{}, err
	}
	d, found, err := s.st.Deadline(ctx, owner, member)
	return memberDeadline(d, found, err, owner, member)
}

// Extend pushes a live member's deadline to now+ttl and returns it; a deadline
// already later stays (Extend never shortens). An absent or expired member
// gets an error matching ErrNotFound: an expired member cannot be revived.
func (s *Set) Extend(ctx context.Context, owner, member string, ttl time.Duration) (time.Time, error) {
	if err := s.checkOwnerMember(owner, member); err != nil {
		return time.Time{}, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return time.Time{}, err
	}
	d, found, err := s.st.Extend(ctx, owner, member, ms)
	return memberDeadline(d, found, err, owner, member)
}

// memberDeadline returns a member's deadline d, err, or an error matching
// ErrNotFound when it was not found.
func memberDeadline(d time.Time, found bool, err error, owner, member string) (time.Time, error) {
	if err == nil && !found {
		return time.Time{}, fmt.Errorf("%w: %q of owner %q", ErrNotFound, member, owner)
	}
	return d, err
}

// Count returns the number of live members of owner.
func (s *Set) Count(ctx context.Context, owner string) (int, error) {
	if err := s.checkOwner(owner); err != nil {
		return 0, err
	}
	return s.st.Count(ctx, owner)
}

// Members returns at most n of owner's live members, earliest deadline first
// (members with equal deadlines in byte order); n <= 0 means all.
func (s *Set) Members(ctx context.Context, owner string, n int) ([]Member, error) {
	if err := s.checkOwner(owner); err != nil {
		return nil, err
	}
	ms, err := s.st.Members(ctx, owner, max(n, 0))
	if err != nil {
		return nil, err
	}
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = Member(m)
	}
	return out, nil
}

// Payload returns the payload stored with a live member (nil when it has
// none), or an error matching ErrNotFound when the member is absent or
// expired.
func (s *Set) Payload(ctx context.Context, owner, member string) ([]byte, error) {
	if err := s.checkOwnerMember(owner, member); err != nil {
		return nil, err
	}
	p, found, err := s.st.Payload(ctx, owner, member)
	if err == nil && !found {
		return nil, fmt.Errorf("%w: %q of owner %q", ErrNotFound, member, owner)
	}
	return p, err
}
