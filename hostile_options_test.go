package expset

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rows of the hostile-input table (hostile_test.go): the options of Open,
// Consume and NewSweeper, WithDurability, and set names.

// hostileOptionRows are the rows of the options of Open, Consume and
// NewSweeper, and of WithDurability.
func hostileOptionRows(rows *hostileRows) {
	row, errIf, ok := rows.row, rows.errIf, rows.ok
	// Options of Open.
	shardOpts := []struct {
		desc string
		n    int
	}{{"WithShards(0)", 0}, {"WithShards(-1)", -1}, {"WithShards(maxShards+1)", maxShards + 1}, {"WithShards(math.MinInt)", math.MinInt}}
	for _, so := range shardOpts {
		n := so.n
		rows.cs = append(rows.cs, hostileCase{call: "Open", input: so.desc, want: ErrInvalidArgument, name: "shards-bad",
			run: func(e *hostileEnv) (string, error) {
				_, err := Open(context.Background(), e.rdb, e.named("shards-bad"), WithShards(n))
				return "", err
			}})
	}
	groupOpts := []struct {
		desc string
		opts []OpenOption
		want error
	}{
		{"WithConsumerGroups(\"\")", []OpenOption{WithExpiryEvents(), WithConsumerGroups("")}, ErrInvalidArgument},
		{"WithConsumerGroups(257 bytes)", []OpenOption{WithExpiryEvents(), WithConsumerGroups(strings.Repeat("g", maxConsumerLen+1))}, ErrInvalidArgument},
		{"WithConsumerGroups without WithExpiryEvents", []OpenOption{WithConsumerGroups("billing")}, ErrInvalidArgument},
	}
	for _, g := range groupOpts {
		rows.cs = append(rows.cs, hostileCase{call: "Open", input: g.desc, want: g.want, name: "groups-bad",
			run: func(e *hostileEnv) (string, error) {
				_, err := Open(context.Background(), e.rdb, e.named("groups-bad"), g.opts...)
				return "", err
			}})
	}
	retentionOpts := []struct {
		desc     string
		maxAge   time.Duration
		maxLen   int
		maxBytes int64
	}{
		{"WithEventRetention(0, 1, 1MiB)", 0, 1, minEventBytes},
		{"WithEventRetention(999ms, 1, 1MiB)", time.Second - time.Millisecond, 1, minEventBytes},
		{"WithEventRetention(100 years + 1ms, 1, 1MiB)", maxTTL + time.Millisecond, 1, minEventBytes},
		{"WithEventRetention(-1ns, 1, 1MiB)", -1, 1, minEventBytes},
		{"WithEventRetention(1s, 0, 1MiB)", time.Second, 0, minEventBytes},
		{"WithEventRetention(1s, -1, 1MiB)", time.Second, -1, minEventBytes},
		{"WithEventRetention(1s, 2^30+1, 1MiB)", time.Second, maxEventMaxLen + 1, minEventBytes},
		{"WithEventRetention(1s, math.MinInt, 1MiB)", time.Second, math.MinInt, minEventBytes},
		{"WithEventRetention(1s, 1, 0)", time.Second, 1, 0},
		{"WithEventRetention(1s, 1, 1MiB-1)", time.Second, 1, minEventBytes - 1},
		{"WithEventRetention(1s, 1, 1TiB+1)", time.Second, 1, maxEventBytes + 1},
		{"WithEventRetention(1s, 1, -1)", time.Second, 1, -1},
		{"WithEventRetention(1s, 1, math.MinInt64)", time.Second, 1, math.MinInt64},
		{"WithEventRetention(1s, 1, math.MaxInt64)", time.Second, 1, math.MaxInt64},
	}
	for _, r := range retentionOpts {
		rows.cs = append(rows.cs, hostileCase{call: "NewSweeper", input: r.desc, want: ErrInvalidArgument,
			run: func(e *hostileEnv) (string, error) {
				s, err := Open(context.Background(), e.rdb, e.named("retention-bad"), WithExpiryEvents())
				if err != nil {
					return "", err
				}
				_, err = NewSweeper(s, WithEventRetention(r.maxAge, r.maxLen, r.maxBytes))
				return "", err
			}})
	}
	row("NewSweeper", "WithEventRetention(1s, 1, 1MiB) and (100 years, 2^30, 1TiB)", nil, "ok", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("retention-ok"), WithExpiryEvents())
		if err != nil {
			return "", err
		}
		for _, o := range []SweeperOption{WithEventRetention(time.Second, 1, minEventBytes), WithEventRetention(maxTTL, maxEventMaxLen, maxEventBytes)} {
			if _, err := NewSweeper(s, o); err != nil {
				return "", err
			}
		}
		return "ok", nil
	})
	row("NewSweeper", "WithEventRetention(1h, 10, 64MiB) on a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("retention-no-events"), WithSweepIndex())
		if err != nil {
			return "", err
		}
		_, err = NewSweeper(s, WithEventRetention(time.Hour, 10, defaultEventBytes))
		return "", err
	})

	// Options of Consume and NewSweeper: each is checked against its call's
	// range (WithLeaseTTL and WithPollInterval apply to both, with their own
	// ranges). consume opens a set with events and runs Consume with an
	// ended context: it checks its options, then returns at once.
	consume := func(e *hostileEnv, opts ...ConsumeOption) error {
		s, err := Open(context.Background(), e.rdb, e.named("consume-opts"), WithExpiryEvents())
		if err != nil {
			return err
		}
		done, cancel := context.WithCancel(e.ctx)
		cancel()
		return s.Consume(done, "g", "c", func(context.Context, Expiry) error { return nil }, opts...)
	}
	sweeper := func(e *hostileEnv, opts ...SweeperOption) error {
		s, err := Open(context.Background(), e.rdb, e.named("consume-opts"), WithExpiryEvents())
		if err != nil {
			return err
		}
		_, err = NewSweeper(s, opts...)
		return err
	}
	loopOpts := []struct {
		call string
		desc string
		opt  any // a ConsumeOption for Set.Consume, a SweeperOption for NewSweeper
		ok   bool
	}{
		{"Set.Consume", "WithMaxHandlingTime(0)", WithMaxHandlingTime(0), false},
		{"Set.Consume", "WithMaxHandlingTime(-1ns)", WithMaxHandlingTime(-1), false},
		{"Set.Consume", "WithMaxHandlingTime(24h+1ns)", WithMaxHandlingTime(24*time.Hour + 1), false},
		{"Set.Consume", "WithMaxHandlingTime(1ms)", WithMaxHandlingTime(time.Millisecond), true},
		{"Set.Consume", "WithMaxHandlingTime(24h)", WithMaxHandlingTime(24 * time.Hour), true},
		{"Set.Consume", "WithConcurrency(0)", WithConcurrency(0), false},
		{"Set.Consume", "WithConcurrency(-1)", WithConcurrency(-1), false},
		{"Set.Consume", "WithConcurrency(math.MinInt)", WithConcurrency(math.MinInt), false},
		{"Set.Consume", "WithConcurrency(1001)", WithConcurrency(maxConcurrency + 1), false},
		{"Set.Consume", "WithConcurrency(1)", WithConcurrency(1), true},
		{"Set.Consume", "WithConcurrency(1000)", WithConcurrency(maxConcurrency), true},
		{"Set.Consume", "WithOwnerConcurrency(-1)", WithOwnerConcurrency(-1), false},
		{"Set.Consume", "WithOwnerConcurrency(math.MinInt)", WithOwnerConcurrency(math.MinInt), false},
		{"Set.Consume", "WithOwnerConcurrency(1<<20+1)", WithOwnerConcurrency(maxOwnerConcurrency + 1), false},
		{"Set.Consume", "WithOwnerConcurrency(0)", WithOwnerConcurrency(0), true},
		{"Set.Consume", "WithOwnerConcurrency(1<<20)", WithOwnerConcurrency(maxOwnerConcurrency), true},
		{"Set.Consume", "WithGroupConcurrency(-1)", WithGroupConcurrency(-1), false},
		{"Set.Consume", "WithGroupConcurrency(math.MinInt)", WithGroupConcurrency(math.MinInt), false},
		{"Set.Consume", "WithGroupConcurrency(1<<20+1)", WithGroupConcurrency(maxGroupConcurrency + 1), false},
		{"Set.Consume", "WithGroupConcurrency(0)", WithGroupConcurrency(0), true},
		{"Set.Consume", "WithGroupConcurrency(1<<20)", WithGroupConcurrency(maxGroupConcurrency), true},
		{"Set.Consume", "WithLeaseTTL(0)", WithLeaseTTL(0), false},
		{"Set.Consume", "WithLeaseTTL(24h+1ns)", WithLeaseTTL(24*time.Hour + 1), false},
		{"Set.Consume", "WithLeaseTTL(1ms)", WithLeaseTTL(time.Millisecond), true},
		{"Set.Consume", "WithPollInterval(0)", WithPollInterval(0), false},
		{"Set.Consume", "WithPollInterval(1m+1ns)", WithPollInterval(time.Minute + 1), false},
		{"NewSweeper", "WithLeaseTTL(1ms) (under the sweeper's 30ms)", WithLeaseTTL(time.Millisecond), false},
		{"NewSweeper", "WithLeaseTTL(1h+1ns)", WithLeaseTTL(time.Hour + 1), false},
		{"NewSweeper", "WithLeaseTTL(30ms)", WithLeaseTTL(30 * time.Millisecond), true},
		{"NewSweeper", "WithPollInterval(0)", WithPollInterval(0), false},
		{"NewSweeper", "WithPollInterval(1m)", WithPollInterval(time.Minute), true},
	}
	for _, lo := range loopOpts {
		row(lo.call, lo.desc, errIf(lo.ok, ErrInvalidArgument), ok(lo.ok, "accepted"), func(e *hostileEnv) (string, error) {
			if lo.call == "Set.Consume" {
				return "accepted", consume(e, lo.opt.(ConsumeOption))
			}
			return "accepted", sweeper(e, lo.opt.(SweeperOption))
		})
	}
	retryHostileRows(row, consume)
	reserveHostileRows(row)
	row("Open", "WithShards(maxShards)", nil, "16384 shards", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("shards-max"), WithShards(maxShards))
		if err != nil {
			return "", err
		}
		return strconv.Itoa(s.Shards()) + " shards", nil
	})
	durables := []struct {
		desc     string
		replicas int
		aof      bool
		timeout  time.Duration
	}{
		{"WithDurability(-1, false, 1s)", -1, false, time.Second},
		{"WithDurability(1001, false, 1s)", maxDurableReplicas + 1, false, time.Second},
		{"WithDurability(math.MinInt, true, 1s)", math.MinInt, true, time.Second},
		{"WithDurability(0, false, 1s) (asks for nothing)", 0, false, time.Second},
		{"WithDurability(1, false, 0)", 1, false, 0},
		{"WithDurability(1, true, -1ns)", 1, true, -1},
		{"WithDurability(1, false, 1m+1ns)", 1, false, maxDurableTimeout + 1},
	}
	for _, d := range durables {
		row("Open", d.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := Open(context.Background(), e.rdb, e.named("durable-bad"), WithDurability(d.replicas, d.aof, d.timeout))
			return "", err
		})
	}
	row("Open", "WithDurability(1000, false, 1ms) on a server without replicas, then Quota.Acquire", nil, "allowed true, durable false", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("durable"), WithDurability(maxDurableReplicas, false, time.Millisecond))
		if err != nil {
			return "", err
		}
		d, err := must[*Quota](e.t)(NewQuota(s, 1)).Acquire(e.ctx, "o", "m", time.Minute)
		return fmt.Sprintf("allowed %v, durable %v", d.Allowed, d.Durable), err
	})
	row("Open", "WithEvictingServer()", nil, "16 shards", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("evicting"), WithEvictingServer())
		if err != nil {
			return "", err
		}
		return strconv.Itoa(s.Shards()) + " shards", nil
	})
	row("Open", "a nil option, WithClock(nil), WithLogger(nil)", nil, "16 shards", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("nil-options"), nil, WithClock(nil), WithLogger(nil))
		if err != nil {
			return "", err
		}
		return strconv.Itoa(s.Shards()) + " shards", nil
	})
	row("Open", "other shards than recorded", ErrConfigMismatch, "", func(e *hostileEnv) (string, error) {
		_, err := Open(e.ctx, e.rdb, e.s.Name(), WithShards(3), WithPayloadStorage())
		return "", err
	})
	row("Open", "without the recorded WithPayloadStorage", ErrConfigMismatch, "", func(e *hostileEnv) (string, error) {
		_, err := Open(e.ctx, e.rdb, e.s.Name())
		return "", err
	})
	row("ReadConfiguration", "a valid name never opened", ErrNotFound, "", func(e *hostileEnv) (string, error) {
		_, err := ReadConfiguration(e.ctx, e.rdb, e.named("never"))
		return "", err
	})
	row("Drop", "a valid name never opened", nil, "0 keys", func(e *hostileEnv) (string, error) {
		n, err := Drop(e.ctx, e.rdb, e.named("never"))
		return strconv.Itoa(n) + " keys", err
	})
}

// hostileNameRows are the rows of set names.
func hostileNameRows(rows *hostileRows) {
	errIf, ok := rows.errIf, rows.ok
	// Names: they sit inside every key's hash tag, and Drop matches keys by
	// pattern, so only letters, digits and _.:/- are allowed.
	names := []hostileValue{
		{"name empty", "", false},
		{"name of 129 bytes", strings.Repeat("n", maxNameLen+1), false},
		val("{a}", false), val("a{", false), val("a}", false), val("*", false), val("a?", false),
		val("[a]", false), val("a b", false), val("ü", false), val("a\x00", false), val("a\n", false),
		{"name of 128 bytes (maxNameLen)", "max-length", true},
		{"name using all of `_.:/-`", "a_b.c:d/e-f", true},
	}
	for _, n := range names {
		in, v, good := n.desc, n.v, n.ok
		if strings.HasPrefix(n.desc, "`") {
			in = "name " + n.desc
		}
		name := func(e *hostileEnv) string {
			if !good {
				return v
			}
			if v == "max-length" {
				return e.named(strings.Repeat("n", maxNameLen))
			}
			return e.named(v)
		}
		err := errIf(good, ErrInvalidArgument)
		rows.cs = append(rows.cs,
			hostileCase{call: "Open", input: in, want: err, got: ok(good, "16 shards"), name: v, run: func(e *hostileEnv) (string, error) {
				s, err := Open(context.Background(), e.rdb, name(e))
				if err != nil {
					return "", err
				}
				if good && len(s.Name()) != len(name(e)) {
					return "", fmt.Errorf("name %q became %q", name(e), s.Name())
				}
				return strconv.Itoa(s.Shards()) + " shards", nil
			}},
			hostileCase{call: "Open", input: in + ", opened before", want: err, got: ok(good, "16 shards"), name: v, run: func(e *hostileEnv) (string, error) {
				s, err := Open(e.ctx, e.rdb, name(e))
				if err != nil {
					return "", err
				}
				return strconv.Itoa(s.Shards()) + " shards", nil
			}},
			hostileCase{call: "ReadConfiguration", input: in, want: err, got: ok(good, "16 shards"), run: func(e *hostileEnv) (string, error) {
				c, err := ReadConfiguration(e.ctx, e.rdb, name(e))
				return strconv.Itoa(c.Shards) + " shards", err
			}},
			hostileCase{call: "Drop", input: in, want: err, got: ok(good, "1 keys"), run: func(e *hostileEnv) (string, error) {
				n, err := Drop(e.ctx, e.rdb, name(e))
				return strconv.Itoa(n) + " keys", err
			}},
		)
	}
}
