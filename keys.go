package expset

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Limits on what a call accepts. Longer values get the matching Err* error
// and nothing is written.
const (
	MaxNameLen    = 128     // bytes in a set name
	MaxOwnerLen   = 1024    // bytes in an owner
	MaxMemberLen  = 1024    // bytes in a member
	MaxPayloadLen = 1 << 20 // bytes in a payload
	MaxShards     = 16384   // shards of one set (Redis Cluster's slot count)
	MaxLimit      = 1 << 30 // a quota's limit
)

// The key layout. For a set named "orders" with the owner in shard S:
//
//	expset:{orders}:meta        string  the configuration recorded by the first New
//	expset:{orders:S}:o:<owner> zset    member -> deadline (Unix ms)
//	expset:{orders:S}:p:<owner> hash    member -> payload (WithPayloads only)
//	expset:{orders:S}:due       zset    owner -> a score <= its earliest deadline
//	expset:{orders:S}:ev        stream  expiry events (WithExpiryEvents only)
//	expset:{orders:S}:dead      stream  dead-lettered expiry events
//	expset:{orders:S}:lease     string  the sweeper's lease on the shard
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
	due     string
	events  string
	dead    string
	lease   string
}

func newShardKeys(name string, shard int) shardKeys {
	tag := keyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:"
	return shardKeys{
		owner:   tag + "o:",
		payload: tag + "p:",
		due:     tag + "due",
		events:  tag + "ev",
		dead:    tag + "dead",
		lease:   tag + "lease",
	}
}

func metaKey(name string) string { return keyPrefix + "{" + name + "}:meta" }

// shardOf maps an owner to its shard with 32-bit FNV-1a. The mapping is part
// of the stored layout: it must never change.
func shardOf(owner string, shards int) int {
	h := uint32(2166136261)
	for i := 0; i < len(owner); i++ {
		h ^= uint32(owner[i])
		h *= 16777619
	}
	return int(h % uint32(shards))
}

func validateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: %q must be 1 to %d bytes", ErrInvalidName, name, MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, name)
	}
	for _, r := range name {
		if r == '{' || r == '}' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: %q holds %q (braces, spaces and control characters would break the hash tag or the CLI)", ErrInvalidName, name, r)
		}
	}
	return nil
}

func validateOwner(owner string) error {
	if owner == "" || len(owner) > MaxOwnerLen {
		return fmt.Errorf("%w: owner of %d bytes (want 1 to %d)", ErrInvalidOwner, len(owner), MaxOwnerLen)
	}
	return nil
}

func validateMember(member string) error {
	if member == "" || len(member) > MaxMemberLen {
		return fmt.Errorf("%w: member of %d bytes (want 1 to %d)", ErrInvalidMember, len(member), MaxMemberLen)
	}
	return nil
}
