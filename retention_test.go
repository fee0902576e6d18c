package expset

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// trimmedTotal sums ShardStats.Trimmed over the shards of s.
func trimmedTotal(t *testing.T, s *Set) int64 {
	t.Helper()
	var n int64
	for _, st := range must[[]ShardStats](t)(s.Stats(context.Background())) {
		n += st.Trimmed
	}
	return n
}

// TestEventRetentionMaxLen: with no consumer at all, a sweep that writes 12
// events to a stream retained at 5 leaves the 5 latest, and the 7 trimmed
// are counted in SweepStats, Stats and Hooks.OnSweep; later sweeps add to the
// count.
func TestEventRetentionMaxLen(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		var hooked int
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(),
			WithHooks(Hooks{OnSweep: func(_ context.Context, ci CallInfo, si SweepStats) { hooked += si.Trimmed }}))
		ctx := context.Background()
		for i := range 12 {
			must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Duration(i+1)*time.Millisecond))
		}
		clk.Advance(time.Second)
		st := must[SweepStats](t)(newSweeper(t, s, WithEventRetention(time.Hour, 5, defaultEventBytes)).SweepOnce(ctx))
		if st.Expired != 12 || st.Trimmed != 7 || hooked != 7 {
			t.Fatalf("sweep: %+v, hooks saw %d trimmed; want 12 expired, 7 trimmed", st, hooked)
		}
		var owners []string
		for _, m := range b.rdb.XRange(ctx, s.shards[0].Events, "-", "+").Val() {
			owners = append(owners, m.Values["o"].(string))
		}
		if got, want := strings.Join(owners, ","), "o7,o8,o9,o10,o11"; got != want {
			t.Fatalf("kept %v, want the latest %v", owners, want)
		}
		if n := trimmedTotal(t, s); n != 7 {
			t.Fatalf("Stats: %d trimmed, want 7", n)
		}
		must[time.Time](t)(s.Add(ctx, "late", "m", time.Millisecond))
		clk.Advance(time.Second)
		st = must[SweepStats](t)(newSweeper(t, s, WithEventRetention(time.Hour, 5, defaultEventBytes)).SweepOnce(ctx))
		if st.Trimmed != 1 || trimmedTotal(t, s) != 8 || b.rdb.XLen(ctx, s.shards[0].Events).Val() != 5 {
			t.Fatalf("second sweep: %+v, %d trimmed in all, %d in the stream", st, trimmedTotal(t, s), b.rdb.XLen(ctx, s.shards[0].Events).Val())
		}
	})
}

// TestEventRetentionMaxAge: an event older than the max age (by its stream
// ID, the server's clock) is trimmed by Sweeper.Run with nothing new written
// and no consumer, on every shard, and counted; younger ones stay.
func TestEventRetentionMaxAge(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newTestSet(t, b, WithShards(3), WithExpiryEvents())
		ctx := context.Background()
		server := must[time.Time](t)(b.rdb.Time(ctx).Result())
		for i, sk := range s.shards {
			for _, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, time.Minute} {
				id := strconv.FormatInt(server.Add(-age).UnixMilli(), 10) + "-" + strconv.Itoa(i)
				if err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Events, ID: id, Values: []any{"o", "x", "m", "m", "d", "1"}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		stop := runSweeper(t, newSweeper(t, s, WithPollInterval(5*time.Millisecond), WithEventRetention(time.Hour, 1000, defaultEventBytes)))
		waitFor(t, "old events trimmed", func() bool { return trimmedTotal(t, s) == 6 })
		stop()
		for i, sk := range s.shards {
			if n := b.rdb.XLen(ctx, sk.Events).Val(); n != 1 {
				t.Errorf("shard %d keeps %d events, want the minute-old one", i, n)
			}
		}
	})
}

// TestEventRetentionOptions: out-of-range bounds, or retention on a set
// without events, fail NewSweeper with ErrInvalidArgument, writing nothing.
func TestEventRetentionOptions(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	ctx := context.Background()
	events := must[*Set](t)(Open(ctx, rdb, "retention", WithExpiryEvents()))
	index := must[*Set](t)(Open(ctx, rdb, "retention-index", WithSweepIndex()))
	before := snapshot(t, rdb, "retention")
	for _, c := range []struct {
		s   *Set
		opt SweeperOption
	}{
		{events, WithEventRetention(999*time.Millisecond, 10, defaultEventBytes)},
		{events, WithEventRetention(maxTTL+time.Millisecond, 10, defaultEventBytes)},
		{events, WithEventRetention(time.Hour, 0, defaultEventBytes)},
		{events, WithEventRetention(time.Hour, maxEventMaxLen+1, defaultEventBytes)},
		{index, WithEventRetention(time.Hour, 10, defaultEventBytes)},
	} {
		if _, err := NewSweeper(c.s, c.opt); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithEventRetention") {
			t.Errorf("NewSweeper(%s): %v, want ErrInvalidArgument naming WithEventRetention", c.s.Name(), err)
		}
	}
	if after := snapshot(t, rdb, "retention"); !maps.Equal(after, before) {
		t.Fatalf("rejected NewSweeper wrote: %v, was %v", after, before)
	}
	if _, err := NewSweeper(events, WithEventRetention(time.Second, 1, defaultEventBytes)); err != nil {
		t.Fatalf("smallest bounds: %v", err)
	}
}

// TestRetentionTrimUnderHandlersLeavesNothing: retention trims the events
// that four handler calls are working on (and those read behind them);
// two calls then return nil and two fail, and are tried again. No path
// leaves anything behind: nothing pending, no attempt field in the shard's
// attempts hash, and no dead letter of a trimmed event (a call that fails
// on its last attempt may find its event trimmed).
func TestRetentionTrimUnderHandlersLeavesNothing(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 8
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, n)
		started := make(chan string, n)
		release := make(chan struct{})
		var stops []func()
		for i := range 4 {
			fail := i >= 2
			attempts := WithMaxAttempts(2 - i/3) // c3's failing call is its last: it buries
			stops = append(stops, consumeInBackground(t, s, "g", "c"+strconv.Itoa(i), func(ctx context.Context, e Expiry) error {
				if e.Attempt == 1 {
					started <- eventKey(e)
					<-release
				}
				if fail && e.Attempt == 1 {
					return errors.New("fails once")
				}
				return nil
			}, WithLeaseTTL(300*time.Millisecond), WithPollInterval(5*time.Millisecond), WithReadBatch(2), attempts, WithoutSweeper()))
		}
		for range 4 {
			<-started
		}
		st := must[SweepStats](t)(newSweeper(t, s, WithEventRetention(time.Hour, 1, defaultEventBytes)).SweepOnce(ctx))
		if st.Trimmed != n-1 {
			t.Fatalf("trimmed %d, want %d", st.Trimmed, n-1)
		}
		kept := must[[]redis.XMessage](t)(b.rdb.XRange(ctx, s.shards[0].Events, "-", "+").Result())
		close(release)
		att := s.shards[0].Att
		waitFor(t, "nothing pending and no attempt field", func() bool {
			p := must[*redis.XPending](t)(b.rdb.XPending(ctx, s.shards[0].Events, "g").Result())
			return p.Count == 0 && b.rdb.HLen(ctx, att).Val() == 0
		})
		for _, stop := range stops {
			stop()
		}
		if p := must[*redis.XPending](t)(b.rdb.XPending(ctx, s.shards[0].Events, "g").Result()); p.Count != 0 {
			t.Fatalf("%d entries pending: %+v", p.Count, p)
		}
		if f := b.rdb.HGetAll(ctx, att).Val(); len(f) != 0 {
			t.Fatalf("attempt fields left: %v", f)
		}
		// A trimmed event is not buried: retention took (and counted) it.
		d, err := s.DeadLetters(ctx, allShards, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d {
			if len(kept) != 1 || l.Event.ID != kept[0].ID {
				t.Errorf("dead letter of a trimmed event: %+v", l)
			}
		}
	})
}

// TestEventRetentionMaxBytes: events carrying 100 KiB payloads each, 4 MB
// in all, swept into a stream bounded to 1 MiB of memory: the stream keeps
// the latest events that fit (by Redis's estimate, MEMORY USAGE), the
// oldest are trimmed, and every one trimmed is counted.
func TestEventRetentionMaxBytes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 40
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		payload := []byte(strings.Repeat("x", 100<<10))
		for i := range n {
			must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Duration(i+1)*time.Millisecond, WithPayload(payload)))
		}
		clk.Advance(time.Second)
		st := must[SweepStats](t)(newSweeper(t, s, WithEventRetention(time.Hour, n, minEventBytes)).SweepOnce(ctx))
		stream := s.shards[0].Events
		kept := must[[]redis.XMessage](t)(b.rdb.XRange(ctx, stream, "-", "+").Result())
		used := must[int64](t)(b.rdb.MemoryUsage(ctx, stream).Result())
		if st.Expired != n || len(kept) == 0 || len(kept) >= n || st.Trimmed != n-len(kept) || trimmedTotal(t, s) != int64(st.Trimmed) {
			t.Fatalf("sweep %+v: %d kept, %d trimmed in Stats; want %d expired, some kept, the rest trimmed and counted", st, len(kept), trimmedTotal(t, s), n)
		}
		if used > minEventBytes {
			t.Errorf("the stream takes %d bytes, want at most %d", used, minEventBytes)
		}
		if last := kept[len(kept)-1].Values["o"]; last != "o"+strconv.Itoa(n-1) {
			t.Errorf("the newest event kept is of %v, want o%d", last, n-1)
		}
		t.Logf("%s: %d of %d events kept, %d bytes", b.name, len(kept), n, used)
	})
}
