package store

import (
	"strconv"
	"strings"
)

// The key layout. For a set named "orders" with the owner in shard S:
//
//	expset:{orders}:meta        hash    the configuration recorded by the first Open
//	expset:{orders}:sweepers    zset    Sweeper.Run's leases: token -> lease end (Unix ms)
//	expset:{orders}:gslots:<group> zset the call slots of a group capped as a whole
//	                                    (WithGroupConcurrency): token -> lease end (Unix ms)
//	expset:{orders}:gslots:<group>:wake channel a slot of the group at its cap was freed
//	expset:{orders:S}:o:<owner> zset    member -> deadline (Unix ms)
//	expset:{orders:S}:p:<owner> hash    member -> payload (WithPayloadStorage only)
//	expset:{orders:S}:due       zset    owner -> a score <= its earliest deadline
//	expset:{orders:S}:ev        stream  expiry events (WithExpiryEvents only)
//	expset:{orders:S}:dead      stream  dead-lettered expiry events
//	expset:{orders:S}:att       hash    "<event ID> <group>" -> "<calls begun> <token>" (lua/groups.lua);
//	                                    the groups' and owners' pauses (lua/pause.lua)
//	expset:{orders:S}:runo      hash    owner slots held: "F:<len(group)>:<group><owner>" -> "1" (the first),
//	                                    "N:<len(group)>:<group><owner>" -> how many more (lua/groups.lua)
//	expset:{orders:S}:trimmed   string  events retention removed unconsumed (WithEventRetention)
//	expset:{orders:S}:r:<n>:<owner><member>
//	                            list    an eviction receipt (WithEvictOldest):
//	                                    n is len(owner) in decimal
//	expset:{orders:S}:r:#<token> string a job call's receipt (jobs.go)
//	expset:{orders:S}:o:\x00job:<b> zset  the jobs of bucket b (Set.Put; jobs.go)
//	expset:{orders:S}:p:\x00job:<b> hash  their payloads
//	expset:{orders:S}:o:\x00job:sched zset the shard's schedules: ID -> next tick (Set.PutSchedule; schedule.go)
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
const KeyPrefix = "expset:"

// Keys holds the precomputed keys of one shard.
type Keys struct {
	Owner   string // prefix of owner keys: expset:{name:S}:o:
	Payload string // prefix of payload keys: expset:{name:S}:p:
	Receipt string // prefix of eviction receipts: expset:{name:S}:r:
	Due     string
	Events  string
	Dead    string
	Att     string
	Runo    string // the owner slots held (WithOwnerConcurrency): hash, see lua/groups.lua
	Trimmed string
	Sched   string // the schedules' records: hash, see lua/schedule.lua
	Line    string // prefix of wait lines: expset:{name:S}:w:
	Leases  string // prefix of ticket leases: expset:{name:S}:wl:
	Wake    string // the shard's wake-up channel
	DueWake string // the channel of the due index's wake-ups: Due + ":wake"
	EvWake  string // the channel of the event stream's wake-ups: Events + ":wake"
	Shard   int    // S: the shard these keys belong to
}

// SlotFields are the fields of a shard's Runo hash that keep the owner
// slots owner holds in group (lua/groups.lua): first is there while a call
// holds the first slot, more counts the others held.
func SlotFields(group, owner string) (first, more string) {
	p := slotPrefix(group)
	return "F" + p + owner, "N" + p + owner
}

// slotPrefix is what every first-slot field of group starts with but its
// first byte: ":<len(group)>:<group>".
func slotPrefix(group string) string {
	return ":" + strconv.Itoa(len(group)) + ":" + group
}

// NewKeys returns the keys of shard of the set called name.
func NewKeys(name string, shard int) Keys {
	tag := KeyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:"
	return Keys{
		Owner:   tag + "o:",
		Payload: tag + "p:",
		Receipt: tag + "r:",
		Due:     tag + "due",
		Events:  tag + "ev",
		Dead:    tag + "dead",
		Att:     tag + "att",
		Runo:    tag + "runo",
		Trimmed: tag + "trimmed",
		Sched:   tag + "sched",
		Line:    tag + "w:",
		Leases:  tag + "wl:",
		Wake:    tag + "wake",
		DueWake: tag + "due:wake",
		EvWake:  tag + "ev:wake",
		Shard:   shard,
	}
}

// Owns reports whether key is one of the shard's keys. The pattern
// ShardPattern gives also matches the meta key of the set called "name:S",
// which is not. A key added to Keys belongs here too.
func (k *Keys) Owns(key string) bool {
	switch key {
	case k.Due, k.Events, k.Dead, k.Att, k.Runo, k.Trimmed, k.Sched, k.Wake, k.DueWake, k.EvWake: // the wakes are channels: no key has their names
		return true
	}
	return strings.HasPrefix(key, k.Owner) || strings.HasPrefix(key, k.Payload) || strings.HasPrefix(key, k.Receipt) ||
		strings.HasPrefix(key, k.Line) || strings.HasPrefix(key, k.Leases)
}

// ShardPattern is the SCAN pattern that finds every key of shard of the set
// called name (and the meta key of a set called "name:shard": see Owns).
func ShardPattern(name string, shard int) string {
	return KeyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:*"
}

// MetaKey is the key of the configuration recorded for the set called name.
func MetaKey(name string) string { return KeyPrefix + "{" + name + "}:meta" }

// MetaPattern is the SCAN pattern that finds every set's meta key.
const MetaPattern = KeyPrefix + "{*}:meta"

// NameOfMeta returns the set name of a meta key, and false for a key that
// is not one.
func NameOfMeta(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, KeyPrefix+"{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(name, "}:meta")
}

// SweepersKey is the key of the sweeper registry of the set called name.
func SweepersKey(name string) string { return KeyPrefix + "{" + name + "}:sweepers" }

// OwnerKey is the key of owner's sorted set, in the shard of k.
func (k *Keys) OwnerKey(owner string) string { return k.Owner + owner }

// PayloadKey is the key of owner's payload hash, in the shard of k.
func (k *Keys) PayloadKey(owner string) string { return k.Payload + owner }

// ShardOf maps an owner to its shard (of shards) with 32-bit FNV-1a. The
// mapping is part of the stored layout: it must never change.
func ShardOf(owner string, shards int) int {
	return int(FNV32(owner) % uint32(shards))
}

// FNV32 is the 32-bit FNV-1a hash of s: ShardOf and the job buckets' mapping.
func FNV32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// GroupSlotsKey is the key of the call slots of consumer group group of the
// set called name, capped as a whole (WithGroupConcurrency): a zset of call
// tokens scored by the end of their slot's lease (lua/group_take.lua). It
// has the set's own hash tag, like the sweeper registry: the slots of a
// group span every shard.
func GroupSlotsKey(name, group string) string {
	return KeyPrefix + "{" + name + "}:gslots:" + group
}

// GroupSlotsPattern is the SCAN pattern that finds the group slot keys of
// the set called name.
func GroupSlotsPattern(name string) string { return KeyPrefix + "{" + name + "}:gslots:*" }
