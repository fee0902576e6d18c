package expset

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rows of the hostile-input table (hostile_test.go): nil options and
// clients, Quota.AcquireWait, Drop, zero values and nil pointers.

// hostileCallRows are the rows of nil options and clients, Quota.AcquireWait,
// Drop beside sets of similar names, and zero values and nil pointers.
func hostileCallRows(rows *hostileRows) {
	row, huge, long := rows.row, rows.huge, rows.long
	// nil options and clients.
	row("Set.Add", "a nil option", nil, "now+1m0s", func(e *hostileEnv) (string, error) {
		d, err := e.s.Add(e.ctx, "nil-option", "m", time.Minute, nil)
		return e.rt(d), err
	})
	row("Quota.Acquire", "a nil option", nil, "allowed, count 1 of 3, deadline now+1m0s", func(e *hostileEnv) (string, error) {
		d, err := e.q.Acquire(e.ctx, "nil-option-q", "m", time.Minute, nil)
		return e.decision(d), err
	})
	// Quota.AcquireWait checks its input as Acquire does, before it joins
	// any line; with room it is admitted at once, like Acquire.
	row("Quota.AcquireWait", "owner empty", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "", "m", time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "owner of 1025 bytes", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, long(maxOwnerLen+1), "m", time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "member empty", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "", time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "member of 1 MiB", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", huge, time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "ttl 0", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", 0)
		return "", err
	})
	row("Quota.AcquireWait", "ttl -1ns", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", -1)
		return "", err
	})
	row("Quota.AcquireWait", "ttl math.MaxInt64", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", math.MaxInt64)
		return "", err
	})
	row("Quota.AcquireWait", "WithLimit(0)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", time.Minute, WithLimit(0))
		return "", err
	})
	row("Quota.AcquireWait", "WithLimit(maxLimit+1)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", time.Minute, WithLimit(maxLimit+1))
		return "", err
	})
	row("Quota.AcquireWait", "WithPayload on a set without WithPayloadStorage", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		q := must[*Quota](e.t)(NewQuota(e.plain, 3))
		_, err := q.AcquireWait(e.ctx, "u", "m", time.Minute, WithPayload([]byte("p")))
		return "", err
	})
	row("Quota.AcquireWait", "WithPayload of maxPayloadLen+1 bytes", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", time.Minute, WithPayload(make([]byte, maxPayloadLen+1)))
		return "", err
	})
	row("Quota.AcquireWait", "owner `\"\\x00\\xff{}\"`, a nil option, room", nil, "allowed, count 1 of 3, deadline now+1m0s", func(e *hostileEnv) (string, error) {
		d, err := e.q.AcquireWait(e.ctx, "\x00\xff{}", "m", time.Minute, nil)
		return e.decision(d), err
	})
	row("NewQuota", "a nil option", nil, "limit 3", func(e *hostileEnv) (string, error) {
		q, err := NewQuota(e.s, 3, nil)
		if err != nil {
			return "", err
		}
		return "limit " + strconv.Itoa(q.limit), nil
	})
	row("NewQuota", "nil Set", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(nil, 3)
		return "", err
	})
	row("NewQuota", "WithEvictionReceiptTTL(1m) without WithEvictOldest", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(e.s, 3, WithEvictionReceiptTTL(time.Minute))
		return "", err
	})
	row("NewQuota", "WithEvictionReceiptTTL(0)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(e.s, 3, WithEvictOldest(), WithEvictionReceiptTTL(0))
		return "", err
	})
	row("NewQuota", "WithEvictionReceiptTTL(25h)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(e.s, 3, WithEvictOldest(), WithEvictionReceiptTTL(25*time.Hour))
		return "", err
	})

	// Drop next to sets whose names extend its own: their keys partly match
	// its patterns (expset:{n:1}:* is also the pattern of n:1's meta key).
	row("Drop", "a set whose neighbours `name:1` and `name:1:2` exist", nil, "2 keys; name:1 and name:1:2 kept", func(e *hostileEnv) (string, error) {
		base := e.named("nb")
		for _, n := range []string{base, base + ":1", base + ":1:2"} {
			s, err := Open(context.Background(), e.rdb, n)
			if err != nil {
				return "", err
			}
			if _, err := s.Add(e.ctx, "b", "m", time.Minute); err != nil { // owner "b" is in shard 1 of 16
				return "", err
			}
		}
		n, err := Drop(e.ctx, e.rdb, base)
		if err != nil {
			return "", err
		}
		out := strconv.Itoa(n) + " keys"
		for _, other := range []string{base + ":1", base + ":1:2"} {
			c, err := ReadConfiguration(e.ctx, e.rdb, other)
			if err != nil {
				return out + "; " + err.Error(), nil
			}
			s, err := Open(e.ctx, e.rdb, other, c.recordedOptions()...)
			if err != nil {
				return "", err
			}
			if ok, err := s.Contains(e.ctx, "b", "m"); err != nil || !ok {
				return out + "; a member of " + other + " lost", err
			}
		}
		return out + "; name:1 and name:1:2 kept", nil
	})

	// Zero values and nil pointers: every call that can reach Redis fails
	// with ErrInvalidArgument instead of panicking; the accessors give zeros.
	setCalls := []struct {
		call string
		run  func(e *hostileEnv, s *Set) error
	}{
		{"Set.Add", func(e *hostileEnv, s *Set) error { _, err := s.Add(e.ctx, "o", "m", time.Minute); return err }},
		{"Set.Remove", func(e *hostileEnv, s *Set) error { _, err := s.Remove(e.ctx, "o", "m"); return err }},
		{"Set.Contains", func(e *hostileEnv, s *Set) error { _, err := s.Contains(e.ctx, "o", "m"); return err }},
		{"Set.Deadline", func(e *hostileEnv, s *Set) error { _, err := s.Deadline(e.ctx, "o", "m"); return err }},
		{"Set.Extend", func(e *hostileEnv, s *Set) error { _, err := s.Extend(e.ctx, "o", "m", time.Minute); return err }},
		{"Set.Count", func(e *hostileEnv, s *Set) error { _, err := s.Count(e.ctx, "o"); return err }},
		{"Set.Members", func(e *hostileEnv, s *Set) error { _, err := s.Members(e.ctx, "o", 0); return err }},
		{"Set.Payload", func(e *hostileEnv, s *Set) error { _, err := s.Payload(e.ctx, "o", "m"); return err }},
		{"Set.Stats", func(e *hostileEnv, s *Set) error { _, err := s.Stats(e.ctx); return err }},
		{"Set.ReadEvents", func(e *hostileEnv, s *Set) error { _, _, err := s.ReadEvents(e.ctx, 0, "0", 1, 0); return err }},
		{"Set.DeadLetters", func(e *hostileEnv, s *Set) error { _, err := s.DeadLetters(e.ctx, allShards, 0); return err }},
		{"Set.Kick", func(e *hostileEnv, s *Set) error { _, err := s.Kick(e.ctx); return err }},
		{"Set.DeleteDeadLetters", func(e *hostileEnv, s *Set) error { _, err := s.DeleteDeadLetters(e.ctx); return err }},
		{"Set.Consume", func(e *hostileEnv, s *Set) error {
			return s.Consume(e.ctx, "g", "c", func(context.Context, Expiry) error { return nil })
		}},
		{"NewQuota", func(e *hostileEnv, s *Set) error { _, err := NewQuota(s, 3); return err }},
		{"NewSweeper", func(e *hostileEnv, s *Set) error { _, err := NewSweeper(s); return err }},
		{"Set.Groups", func(e *hostileEnv, s *Set) error { _, err := s.Groups(e.ctx); return err }},
		{"Set.RemoveGroup", func(e *hostileEnv, s *Set) error { _, err := s.RemoveGroup(e.ctx, "g"); return err }},
		{"Set.Running", func(e *hostileEnv, s *Set) error { _, err := s.Running(e.ctx, "g", 10); return err }},
		{"Set.PausedOwners", func(e *hostileEnv, s *Set) error { _, err := s.PausedOwners(e.ctx, "g"); return err }},
		{"Set.Pause", func(e *hostileEnv, s *Set) error { _, err := s.Pause(e.ctx, "g", ""); return err }},
		{"Set.Resume", func(e *hostileEnv, s *Set) error { _, err := s.Resume(e.ctx, "g", "o"); return err }},
	}
	for _, z := range []struct {
		desc string
		s    *Set
	}{{"zero Set", &Set{}}, {"nil *Set", nil}} {
		for _, c := range setCalls {
			run, s, want := c.run, z.s, error(ErrInvalidArgument)
			if s == nil && (c.call == "NewQuota" || c.call == "NewSweeper") {
				want = ErrInvalidArgument // a nil Set given to a constructor
			}
			row(c.call, z.desc, want, "", func(e *hostileEnv) (string, error) { return "", run(e, s) })
		}
		s := z.s
		row("Set.Name, Shards, ShardOf, OwnerKey", z.desc, nil, `"", 0, -1, ""`, func(e *hostileEnv) (string, error) {
			return fmt.Sprintf("%q, %d, %d, %q", s.Name(), s.Shards(), s.ShardOf("o"), s.OwnerKey("o")), nil
		})
	}
	quotaCalls := []struct {
		call string
		run  func(e *hostileEnv, q *Quota) error
	}{
		{"Quota.Acquire", func(e *hostileEnv, q *Quota) error { _, err := q.Acquire(e.ctx, "o", "m", time.Minute); return err }},
		{"Quota.AcquireMany", func(e *hostileEnv, q *Quota) error { _, err := q.AcquireMany(e.ctx, nil); return err }},
		{"Quota.Release", func(e *hostileEnv, q *Quota) error { _, err := q.Release(e.ctx, "o", "m"); return err }},
	}
	for _, z := range []struct {
		desc string
		q    *Quota
	}{{"zero Quota", &Quota{}}, {"nil *Quota", nil}} {
		for _, c := range quotaCalls {
			run, q := c.run, z.q
			row(c.call, z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) { return "", run(e, q) })
		}
	}
	for _, z := range []struct {
		desc string
		w    *Sweeper
	}{{"zero Sweeper", &Sweeper{}}, {"nil *Sweeper", nil}} {
		w := z.w
		row("Sweeper.SweepOnce", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := w.SweepOnce(e.ctx)
			return "", err
		})
		row("Sweeper.Run", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			return "", w.Run(e.ctx)
		})
	}
	eventsSet := func(e *hostileEnv) (*Set, error) {
		return Open(context.Background(), e.rdb, e.named("groups"), WithExpiryEvents())
	}
	row("Set.Groups", "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.Groups(e.ctx)
		return "", err
	})
	row("Set.Groups", "a set with expiry events and no group", nil, "0 groups", func(e *hostileEnv) (string, error) {
		s, err := eventsSet(e)
		if err != nil {
			return "", err
		}
		gs, err := s.Groups(e.ctx)
		return fmt.Sprintf("%d groups", len(gs)), err
	})
	// RemoveGroup and PausedOwners take a group on a set with events, the
	// first of a group the set has, the second of any group (its pauses are
	// kept for a group made or not).
	byGroup := []struct {
		call string
		run  func(e *hostileEnv, s *Set, group string) error
	}{
		{"Set.RemoveGroup", func(e *hostileEnv, s *Set, group string) error { _, err := s.RemoveGroup(e.ctx, group); return err }},
		{"Set.PausedOwners", func(e *hostileEnv, s *Set, group string) error { _, err := s.PausedOwners(e.ctx, group); return err }},
		{"Set.Pause", func(e *hostileEnv, s *Set, group string) error { _, err := s.Pause(e.ctx, group, ""); return err }},
		{"Set.Resume", func(e *hostileEnv, s *Set, group string) error { _, err := s.Resume(e.ctx, group, "o"); return err }},
	}
	for _, c := range byGroup {
		for _, g := range []struct{ desc, group string }{{`group ""`, ""}, {"group of 257 bytes", strings.Repeat("g", maxConsumerLen+1)}} {
			row(c.call, g.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
				s, err := eventsSet(e)
				if err != nil {
					return "", err
				}
				return "", c.run(e, s, g.group)
			})
		}
		row(c.call, "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			return "", c.run(e, e.s, "g")
		})
	}
	row("Set.RemoveGroup", "a group the set does not have", ErrNotFound, "", func(e *hostileEnv) (string, error) {
		s, err := eventsSet(e)
		if err != nil {
			return "", err
		}
		_, err = s.RemoveGroup(e.ctx, "missing")
		return "", err
	})
	// An owner Pause and Resume refuse, as every call refuses it (the jobs'
	// reserved prefix).
	for _, c := range []struct {
		call  string
		pause bool
	}{{"Set.Pause", true}, {"Set.Resume", false}} {
		row(c.call, "owner \"\\x00job:1\"", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			s, err := eventsSet(e)
			if err != nil {
				return "", err
			}
			if c.pause {
				_, err = s.Pause(e.ctx, "g", "\x00job:1")
			} else {
				_, err = s.Resume(e.ctx, "g", "\x00job:1")
			}
			return "", err
		})
	}
	row("Set.PausedOwners", "a group the set does not have", nil, "none", func(e *hostileEnv) (string, error) {
		s, err := eventsSet(e)
		if err != nil {
			return "", err
		}
		got, err := s.PausedOwners(e.ctx, "missing")
		if got != nil {
			return fmt.Sprintf("%q", got), err
		}
		return "none", err
	})
	groupSet := func(e *hostileEnv) (*Set, error) {
		return Open(context.Background(), e.rdb, e.named("running"), WithExpiryEvents(), WithConsumerGroups("g"))
	}
	for _, c := range []struct {
		desc  string
		group string
		n     int
		want  error
	}{
		{"n 0", "g", 0, ErrInvalidArgument},
		{"n -1", "g", -1, ErrInvalidArgument},
		{"n 10001", "g", maxRunningCalls + 1, ErrInvalidArgument},
		{`group ""`, "", 10, ErrInvalidArgument},
		{"group of 257 bytes", strings.Repeat("g", maxConsumerLen+1), 10, ErrInvalidArgument},
		{"a group the set does not have", "missing", 10, ErrNotFound},
	} {
		row("Set.Running", c.desc, c.want, "", func(e *hostileEnv) (string, error) {
			s, err := groupSet(e)
			if err != nil {
				return "", err
			}
			_, err = s.Running(e.ctx, c.group, c.n)
			return "", err
		})
	}
	row("Set.Running", "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.Running(e.ctx, "g", 10)
		return "", err
	})
	row("Set.Running", "a group with no call running", nil, "0 calls", func(e *hostileEnv) (string, error) {
		s, err := groupSet(e)
		if err != nil {
			return "", err
		}
		got, err := s.Running(e.ctx, "g", 10)
		return fmt.Sprintf("%d calls", len(got.Calls)), err
	})
	nilClients := []struct {
		desc string
		c    redis.UniversalClient
	}{
		{"nil client", nil},
		{"nil *redis.Client", (*redis.Client)(nil)},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil)},
	}
	for _, nc := range nilClients {
		c := nc.c
		row("Open", nc.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := Open(e.ctx, c, "x")
			return "", err
		})
		row("ReadConfiguration", nc.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := ReadConfiguration(e.ctx, c, "x")
			return "", err
		})
		row("Drop", nc.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := Drop(e.ctx, c, "x")
			return "", err
		})
	}
}
