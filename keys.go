package expset

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits on what a call accepts. Longer values get ErrInvalidArgument
// and nothing is written.
const (
	maxNameLen    = 128     // bytes in a set name
	maxOwnerLen   = 1024    // bytes in an owner
	maxMemberLen  = 1024    // bytes in a member
	maxPayloadLen = 1 << 20 // bytes in a payload
	maxShards     = 16384   // shards of one set (Redis Cluster's slot count)
	maxLimit      = 1 << 30 // a quota's limit
)

// The key layout. For a set named "orders" with the owner in shard S:
//
//	expset:{orders}:meta        hash    the configuration recorded by the first Open
//	expset:{orders}:sweepers    zset    Sweeper.Run's leases: token -> lease end (Unix ms)
//	expset:{orders:S}:o:<owner> zset    member -> deadline (Unix ms)
//	expset:{orders:S}:p:<owner> hash    member -> payload (WithPayloadStorage only)
//	expset:{orders:S}:due       zset    owner -> a score <= its earliest deadline
//	expset:{orders:S}:ev        stream  expiry events (WithExpiryEvents only)
//	expset:{orders:S}:dead      stream  dead-lettered expiry events
//	expset:{orders:S}:att       hash    "<event ID> <group>" -> "<calls begun> <token>"
//	expset:{orders:S}:run       zset    "<event ID> <group>" -> lease end of its call's owner slot (Unix ms)
//	expset:{orders:S}:runo      hash    "<event ID> <group>" -> owner; "#<group> <owner>" -> slots held
//	expset:{orders:S}:take      hash    "<group>\x00<consumer>" -> the receipt of its last read (lua/take.lua)
//	expset:{orders:S}:trimmed   string  events retention removed unconsumed (WithEventRetention)
//	expset:{orders:S}:r:<n>:<owner><member>
//	                            list    an eviction receipt (WithEvictOldest):
//	                                    n is len(owner) in decimal
//	expset:{orders:S}:r:#<token> string a job call's receipt (jobs.go)
//	expset:{orders:S}:o:\x00job:<b> zset  the jobs of bucket b (Set.Put; jobs.go)
//	expset:{orders:S}:p:\x00job:<b> hash  their payloads
//	expset:{orders:S}:o:\x00job:sched zset the shard's schedules: ID -> next tick (Set.PutSchedule; schedules.go)
//	expset:{orders:S}:sched     hash    their records (lua/schedule.lua)
//	expset:{orders:S}:w:<owner> zset    wait line: ticket -> arrival number (AcquireWait)
//	expset:{orders:S}:wl:<owner> zset   ticket -> lease deadline (Unix ms)
//	expset:{orders:S}:wake      channel wake-ups of the shard's waiters (pub/sub)
//	expset:{orders:S}:due:wake  channel the due index's next deadline moved earlier (Sweeper)
//	expset:{orders:S}:ev:wake   channel events were appended to the stream (Consume)
//
// Every key of one shard shares the hash tag {orders:S}, so each script's
// keys lie in one Redis Cluster slot. The owner follows the tag verbatim:
// Redis takes the first {...} as the tag, so braces, colons or binary bytes
// in an owner neither move it nor collide with another owner.
const keyPrefix = "expset:"

// shardKeys holds the precomputed keys of one shard.
type shardKeys struct {
	owner   string // prefix of owner keys: expset:{name:S}:o:
	payload string // prefix of payload keys: expset:{name:S}:p:
	receipt string // prefix of eviction receipts: expset:{name:S}:r:
	due     string
	events  string
	dead    string
	att     string
	run     string // owner slots (WithOwnerConcurrency): zset, see lua/slots.lua
	runo    string // their owners and counts: hash
	take    string // the receipts of the consumers' last reads: hash, see lua/take.lua
	trimmed string
	sched   string // the schedules' records: hash, see lua/schedule.lua
	line    string // prefix of wait lines: expset:{name:S}:w:
	leases  string // prefix of ticket leases: expset:{name:S}:wl:
	wake    string // the shard's wake-up channel
	dueWake string // the channel of the due index's wake-ups: due + ":wake"
	evWake  string // the channel of the event stream's wake-ups: events + ":wake"
	shard   int    // S: the shard these keys belong to
}

func newShardKeys(name string, shard int) shardKeys {
	tag := keyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:"
	return shardKeys{
		owner:   tag + "o:",
		payload: tag + "p:",
		receipt: tag + "r:",
		due:     tag + "due",
		events:  tag + "ev",
		dead:    tag + "dead",
		att:     tag + "att",
		run:     tag + "run",
		runo:    tag + "runo",
		take:    tag + "take",
		trimmed: tag + "trimmed",
		sched:   tag + "sched",
		line:    tag + "w:",
		leases:  tag + "wl:",
		wake:    tag + "wake",
		dueWake: tag + "due:wake",
		evWake:  tag + "ev:wake",
		shard:   shard,
	}
}

// owns reports whether key is one of the shard's keys. The pattern
// expset:{name:S}:* that finds them also matches the meta key of the set
// called "name:S", which is not. A key added to shardKeys belongs here too.
func (k *shardKeys) owns(key string) bool {
	switch key {
	case k.due, k.events, k.dead, k.att, k.run, k.runo, k.take, k.trimmed, k.sched, k.wake, k.dueWake, k.evWake: // the wakes are channels: no key has their names
		return true
	}
	return strings.HasPrefix(key, k.owner) || strings.HasPrefix(key, k.payload) || strings.HasPrefix(key, k.receipt) ||
		strings.HasPrefix(key, k.line) || strings.HasPrefix(key, k.leases)
}

func metaKey(name string) string { return keyPrefix + "{" + name + "}:meta" }

// shardOf maps an owner to its shard with 32-bit FNV-1a. The mapping is part
// of the stored layout: it must never change.
func shardOf(owner string, shards int) int {
	return int(fnv32(owner) % uint32(shards))
}

// fnv32 is the 32-bit FNV-1a hash of s.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// validateName accepts 1 to maxNameLen bytes of ASCII letters, digits and
// "_.:/-": no braces (the name is inside every key's hash tag), no glob
// characters (Drop and operators match keys by pattern), no spaces.
func validateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: set name %q must be 1 to %d bytes", ErrInvalidArgument, name, maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.:/-", c) >= 0) {
			return fmt.Errorf("%w: set name %q holds %q: use letters, digits and _.:/-", ErrInvalidArgument, name, c)
		}
	}
	return nil
}

func validateOwner(owner string) error {
	if owner == "" || len(owner) > maxOwnerLen {
		return fmt.Errorf("%w: owner of %d bytes (want 1 to %d)", ErrInvalidArgument, len(owner), maxOwnerLen)
	}
	if strings.HasPrefix(owner, jobOwnerPrefix) {
		return fmt.Errorf("%w: owner %q begins with %q, kept for the jobs of Set.Put and the schedules of Set.PutSchedule: use another owner", ErrInvalidArgument, owner, jobOwnerPrefix)
	}
	return nil
}

func validateMember(member string) error {
	if member == "" || len(member) > maxMemberLen {
		return fmt.Errorf("%w: member of %d bytes (want 1 to %d)", ErrInvalidArgument, len(member), maxMemberLen)
	}
	return nil
}
