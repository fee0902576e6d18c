package expset

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// The bounds of WithDurability.
const (
	maxDurableReplicas = 1000
	maxDurableTimeout  = time.Minute
)

// WithDurability makes the set's writes wait until replicas replicas (0 to
// 1000) have acknowledged them, and with aof also until the master's
// append-only file and the AOFs of those replicas have them on disk, for at
// most timeout (1ms to 1m), and report whether they did: Decision.Durable
// for Quota.Acquire, AcquireWait and AcquireMany, an error matching
// ErrNotDurable returned beside the deadline for Set.Add,
// SweepStats.NotDurable for the sweeper's expiry events. A write that
// missed them still took effect on the master; a failover before the
// replicas have it loses it. By default nothing waits: Redis replicates
// asynchronously, and an admission the master acknowledged but had not yet
// replicated is lost when a replica takes over (docs/guarantees.md).
//
// Cost: the wait (WAIT, or WAITAOF with aof) goes in one pipeline with the
// script, to the server that holds the key (on Redis Cluster, the master of
// its slot), so a write takes no more round trips, but its reply comes only
// when the acknowledgements did, or timeout passed; AcquireMany waits once
// per node. The wait goes with every call, also a denial and an Acquire of a
// member already held (Existing), which write nothing: they report Durable
// false, and wait only until the replicas have the connection's earlier
// writes (all of timeout while too few replicas answer). When timeout plus
// one second exceeds the client's
// ReadTimeout, which bounds a pipeline's replies, the wait goes instead on
// the connection that ran the script, after it, only when the script wrote:
// one more round trip. The sweeper waits that way too, after a batch that
// wrote events only.
//
// aof needs Redis 7.2 or later (WAITAOF) with appendonly yes on the master:
// Open checks both (ErrServerVersion, ErrNotDurable). replicas 0 with aof
// false asks for nothing and fails with ErrInvalidArgument. The setting is
// not recorded in Redis: each process chooses its own. The client must be
// a *redis.Client, *redis.ClusterClient or *redis.Ring.
func WithDurability(replicas int, aof bool, timeout time.Duration) OpenOption {
	return openOption(func(c *setConfig) error {
		if err := inRange("WithDurability replicas", replicas, 0, maxDurableReplicas); err != nil {
			return err
		}
		if err := inRange("WithDurability timeout", timeout, time.Millisecond, maxDurableTimeout); err != nil {
			return err
		}
		if replicas == 0 && !aof {
			return fmt.Errorf("%w: WithDurability(0, false, %v) asks for no acknowledgement: want replicas 1 or more, or aof", ErrInvalidArgument, timeout)
		}
		c.durable = store.Durability{Replicas: replicas, AOF: aof, Timeout: timeout}
		return nil
	})
}

// checkDurableClient rejects WithDurability on a client whose servers
// expset cannot reach one by one.
func checkDurableClient(rdb redis.UniversalClient, d store.Durability) error {
	if !d.On() {
		return nil
	}
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		return nil
	}
	return fmt.Errorf("%w: WithDurability needs a *redis.Client, *redis.ClusterClient or *redis.Ring, not a %T", ErrInvalidArgument, rdb)
}
