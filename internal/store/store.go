// Package store is expset's Redis layer: the key layout of a set
// (keys.go), every Lua script (lua/, composed in scripts.go), beside each
// script one Go file named after it (add.go for add.lua) holding the
// builder of its KEYS and ARGV and the reader of its reply, the runners
// (call.go: EVALSHA with the NOSCRIPT fallback, pipelines, the OnCall
// report; durability.go: WithDurability's waits) and the plain reads of the
// layout (streams, groups, statistics, configuration).
//
// The root package holds the API, its validation and the loops; it builds
// no script's KEYS or ARGV and reads no script's reply. The consumer
// engine batches: it groups its items per shard (Batches) and runs the
// calls the builders make of them (BeginsCall, AckCall,
// RenewCall) several shards at once with RunPipelined, then reads each
// with its reader (ReadBegins, ReadAck, ReadRenew); its other
// scripts and reads are methods that run one call (Claim, Retry, Bury,
// Release, Prune, ReadNew, ...).
package store

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store runs the scripts and reads of one set. It is safe for simultaneous
// use by multiple goroutines. The zero value is not usable; create one with
// New.
type Store struct {
	rdb      redis.UniversalClient
	name     string
	shards   []Keys
	flags    string // script flags fixed by the configuration: e, p, i
	events   bool   // flag e
	payloads bool   // flag p
	clock    func() time.Time
	durable  Durability
	onCall   OnCall
}

// OnCall is told of every script run: its operation (as Call.Op), its
// shard (-1 when it spans several), how long it took (a pipeline's calls
// each get the pipeline's duration) and its error.
type OnCall func(ctx context.Context, op string, shard int, took time.Duration, err error)

// Options is what New needs beside the client and the name.
type Options struct {
	Shards   int              // shards of the set, at least 1
	Events   bool             // expiry events are written (flag e)
	Payloads bool             // payloads are stored (flag p)
	Index    bool             // the due index is kept (flag i)
	Clock    func() time.Time // the injected clock; nil: the server's TIME
	Durable  Durability       // WithDurability's waits; zero: none
	OnCall   OnCall           // nil: no report
}

// New returns the store of the set called name on rdb.
func New(rdb redis.UniversalClient, name string, o Options) *Store {
	s := &Store{rdb: rdb, name: name, events: o.Events, payloads: o.Payloads, clock: o.Clock, durable: o.Durable, onCall: o.OnCall}
	s.shards = make([]Keys, o.Shards)
	for i := range s.shards {
		s.shards[i] = NewKeys(name, i)
	}
	if o.Events {
		s.flags += "e"
	}
	if o.Payloads {
		s.flags += "p"
	}
	if o.Index {
		s.flags += "i"
	}
	return s
}

// Client returns the client the store runs on.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Shards returns the keys of every shard, in shard order. The caller must
// not change them.
func (s *Store) Shards() []Keys { return s.shards }

// ShardOf returns the shard that holds owner.
func (s *Store) ShardOf(owner string) int { return ShardOf(owner, len(s.shards)) }

// OwnerKey returns the key of owner's sorted set.
func (s *Store) OwnerKey(owner string) string { return s.shards[s.ShardOf(owner)].OwnerKey(owner) }

// Durable returns WithDurability's waits, the zero Durability when none.
func (s *Store) Durable() Durability { return s.durable }

// now returns ARGV[1] for the scripts: the injected clock in ms, or "" for
// the server's TIME.
func (s *Store) now() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock().UnixMilli(), 10)
}

// ownerKeys returns the keys the owner scripts (add, acquire, remove,
// extend, payload) declare, always in this order: KEYS[1] the owner's sorted
// set, KEYS[2] the shard's due index, KEYS[3] its event stream, KEYS[4] the
// owner's payload hash. A set with no events, payloads or index touches only
// the first, and declares only that: the scripts use KEYS[2..4] only under
// the flags that need them. The read scripts (count, deadline, members)
// take the first alone.
func (s *Store) ownerKeys(owner string) []string {
	return s.keysIn(s.ShardOf(owner), owner)
}

// keysIn returns ownerKeys for owner kept in shard, whichever shard
// ShardOf gives it (the buckets of Set.Put's jobs are spread by job ID).
func (s *Store) keysIn(shard int, owner string) []string {
	sk := &s.shards[shard]
	if s.flags == "" {
		return []string{sk.Owner + owner}
	}
	return []string{sk.Owner + owner, sk.Due, sk.Events, sk.Payload + owner}
}

// lineKeys returns ownerKeys with the owner's wait line last: the keys of
// the scripts that admit (acquire) or free a slot (remove).
func (s *Store) lineKeys(owner string) []string {
	return append(s.ownerKeys(owner), s.shards[s.ShardOf(owner)].Line+owner)
}
