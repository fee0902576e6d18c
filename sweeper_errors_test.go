package expset

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// syncBuffer is a bytes.Buffer safe for simultaneous use: a slog handler's
// output written by Run's goroutine and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// slogMu is held by the test that captures the default logger.
var slogMu sync.Mutex

// captureSlog makes slog.Default() write text lines to the returned buffer
// until t ends.
func captureSlog(t *testing.T) *syncBuffer {
	t.Helper()
	// The default logger is the process's: the backends of one test, which
	// eachBackend runs in parallel, take turns.
	slogMu.Lock()
	t.Cleanup(slogMu.Unlock)
	buf := &syncBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return buf
}

// oneOwnerPerShard returns an owner of each shard of s.
func oneOwnerPerShard(s *Set) []string {
	owners := make([]string, s.Shards())
	for i, left := 0, s.Shards(); left > 0; i++ {
		o := "o" + strconv.Itoa(i)
		if sh := s.ShardOf(o); owners[sh] == "" {
			owners[sh] = o
			left--
		}
	}
	return owners
}

// TestRunReportsAWrongTypeShard: Sweeper.Run run the plain way (no error
// handler, no hooks) on a set whose shard 0 stream is a string (WRONGTYPE on
// every sweep of it) logs the error at warning level through log/slog,
// naming the op and shard, sweeps the other shards meanwhile, and sweeps
// shard 0, once, when the key is fixed.
func TestRunReportsAWrongTypeShard(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		logs := captureSlog(t)
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents())
		ctx := context.Background()
		owners := oneOwnerPerShard(s)
		for _, o := range owners {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
		}
		if err := b.rdb.Set(ctx, s.shards[0].Events, "not a stream", 0).Err(); err != nil {
			t.Fatal(err)
		}
		stop := runSweeper(t, newSweeper(t, s, WithPollInterval(5*time.Millisecond)))
		clk.Advance(2 * time.Second)
		waitFor(t, "shards 1 to 3 swept", func() bool {
			for i := 1; i < 4; i++ {
				if b.rdb.XLen(ctx, s.shards[i].Events).Val() != 1 {
					return false
				}
			}
			return true
		})
		waitFor(t, "the error logged", func() bool {
			out := logs.String()
			return strings.Contains(out, "WRONGTYPE") && strings.Contains(out, "shard=0") &&
				strings.Contains(out, "level=WARN") && strings.Contains(out, "op=sweep")
		})
		if first := strings.SplitN(logs.String(), "\n", 2)[0]; !strings.Contains(first, s.shards[0].Due) {
			t.Errorf("logged line does not name the key: %q", first)
		}
		if err := b.rdb.Del(ctx, s.shards[0].Events).Err(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "shard 0 swept once healed", func() bool { return b.rdb.XLen(ctx, s.shards[0].Events).Val() == 1 })
		stop()
		for i, sk := range s.shards {
			if n := b.rdb.XLen(ctx, sk.Events).Val(); n != 1 {
				t.Errorf("shard %d: %d events, want 1", i, n)
			}
		}
	})
}

// TestWithLoggerReceivesLoopErrors: with WithLogger, the errors Sweeper.Run
// survives (no Hooks.OnError) go to that logger at warning level, and none
// to slog.Default().
func TestWithLoggerReceivesLoopErrors(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		def := captureSlog(t)
		logs := &syncBuffer{}
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		ctx := context.Background()
		must[time.Time](t)(s.Add(ctx, oneOwnerPerShard(s)[0], "m", time.Second))
		if err := b.rdb.Set(ctx, s.shards[0].Events, "not a stream", 0).Err(); err != nil {
			t.Fatal(err)
		}
		stop := runSweeper(t, newSweeper(t, s, WithPollInterval(5*time.Millisecond)))
		clk.Advance(2 * time.Second)
		waitFor(t, "the error logged to the given logger", func() bool {
			out := logs.String()
			return strings.Contains(out, "WRONGTYPE") && strings.Contains(out, "level=WARN") && strings.Contains(out, "shard=0")
		})
		stop()
		if out := def.String(); out != "" {
			t.Errorf("slog.Default() received %q, want nothing", out)
		}
	})
}

// TestRunReportsEveryErrorToTheHook: with Hooks.OnError set, every failed
// sweep of the broken shard reaches it (op "sweep", the shard, the Redis
// error, a retry delay that grows while the shard keeps failing), nothing
// is logged, the other shards are swept, and the shard resumes when healed.
func TestRunReportsEveryErrorToTheHook(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		logs := captureSlog(t)
		var mu sync.Mutex
		var got []errorReport
		s, clk := newTestSet(t, b, WithShards(3), WithExpiryEvents(), WithHooks(Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
			e := errorReport{ci, retry}
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
		}}))
		reported := func() []errorReport {
			mu.Lock()
			defer mu.Unlock()
			return append([]errorReport(nil), got...)
		}
		ctx := context.Background()
		owners := oneOwnerPerShard(s)
		for _, o := range owners {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
		}
		if err := b.rdb.HSet(ctx, s.shards[2].Events, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		stop := runSweeper(t, newSweeper(t, s, WithPollInterval(5*time.Millisecond)))
		clk.Advance(2 * time.Second)
		waitFor(t, "three errors reported", func() bool { return len(reported()) >= 3 })
		waitFor(t, "shards 0 and 1 swept", func() bool {
			return b.rdb.XLen(ctx, s.shards[0].Events).Val() == 1 && b.rdb.XLen(ctx, s.shards[1].Events).Val() == 1
		})
		errs := reported()
		for i, e := range errs {
			if e.Set != s.Name() || e.Op != "sweep" || e.Shard != 2 || !strings.Contains(e.Err.Error(), "WRONGTYPE") {
				t.Fatalf("report %d: %+v", i, e)
			}
		}
		// Retry of the n-th consecutive failure is at least half of
		// retryMin*2^(n-1); the first three are 50ms+, 100ms+, 200ms+.
		for i, lo := range []time.Duration{retryMin / 2, retryMin, 2 * retryMin} {
			if errs[i].Retry < lo || errs[i].Retry > retryMax {
				t.Fatalf("report %d: retry %v, want %v to %v", i, errs[i].Retry, lo, retryMax)
			}
		}
		if err := b.rdb.Del(ctx, s.shards[2].Events).Err(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "shard 2 swept once healed", func() bool { return b.rdb.XLen(ctx, s.shards[2].Events).Val() == 1 })
		stop()
		if out := logs.String(); out != "" {
			t.Fatalf("logged with a hook set: %s", out)
		}
	})
}

// TestRunReportsToTheErrorHandler: Hooks.OnError receives each error Run
// survives, and then nothing is logged by default.
func TestRunReportsToTheErrorHandler(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		logs := captureSlog(t)
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		ctx := context.Background()
		for _, o := range oneOwnerPerShard(s) {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
		}
		if err := b.rdb.Set(ctx, s.shards[1].Events, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var errs []error
		s.hooks.OnError = func(_ context.Context, ci CallInfo, retry time.Duration) {
			ei := errorReport{ci, retry}
			mu.Lock()
			errs = append(errs, ei.Err)
			mu.Unlock()
		}
		stop := runSweeper(t, newSweeper(t, s, WithPollInterval(5*time.Millisecond)))
		clk.Advance(2 * time.Second)
		waitFor(t, "an error handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(errs) > 0
		})
		stop()
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(errs[0].Error(), "WRONGTYPE") || errors.Is(errs[0], ErrLeaseLost) {
			t.Fatalf("handled %v", errs[0])
		}
		if out := logs.String(); out != "" {
			t.Fatalf("logged with an error handler set: %s", out)
		}
	})
}

// TestRunRetakesItsLeasesAfterAnOutage: while every command fails (LOADING,
// on miniredis, whose key TTLs stand still, so the leases never lapse) the
// lease refreshes fail and are reported as op "lease"; when Redis answers
// again Run takes each lease back with its own token, at once, and sweeps.
// Without the token it would wait for leases that never lapse here.
func TestRunRetakesItsLeasesAfterAnOutage(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	var got []errorReport
	s, clk := newTestSet(t, backend{name: "miniredis", rdb: rdb, mr: mr}, WithShards(2), WithExpiryEvents(),
		WithHooks(Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
			e := errorReport{ci, retry}
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
		}}))
	ctx := context.Background()
	leases := func() []string { return sweeperTokens(t, s) }
	stop := runSweeper(t, newSweeper(t, s, WithPollInterval(5*time.Millisecond), WithLeaseTTL(90*time.Millisecond)))
	waitFor(t, "the lease", func() bool { return len(leases()) == 1 })
	held := leases()

	mr.SetError("LOADING Redis is loading the dataset in memory")
	waitFor(t, "a renewal failed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range got {
			if e.Op == "lease" && e.Shard == -1 && errors.Is(e.Err, errRefresh) && strings.Contains(e.Err.Error(), "LOADING") {
				return true
			}
		}
		return false
	})
	mr.SetError("")
	for _, o := range oneOwnerPerShard(s) {
		must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
	}
	clk.Advance(2 * time.Second)
	waitFor(t, "both shards swept after the outage", func() bool {
		return rdb.XLen(ctx, s.shards[0].Events).Val() == 1 && rdb.XLen(ctx, s.shards[1].Events).Val() == 1
	})
	// The lease is the one taken before the outage: its token again (a
	// loaded machine may let the 90ms lease lapse between two looks; Run
	// then takes it back with the same token).
	var l []string
	for end := time.Now().Add(30 * time.Second); !slices.Equal(l, held); time.Sleep(5 * time.Millisecond) {
		if l = leases(); len(l) > 1 || (len(l) == 1 && !slices.Equal(l, held)) {
			t.Fatalf("leases %q after the outage, want the same tokens %q", l, held)
		}
		if time.Now().After(end) {
			t.Fatalf("leases %q 30s after the outage, want the same tokens %q", l, held)
		}
	}
	stop()
}

// TestSweepOnceSweepsPastAFailingShard: SweepOnce sweeps every shard it can
// when one fails, and returns that shard's error beside the stats of the
// others (it used to cancel the shards still to come at the first error).
func TestSweepOnceSweepsPastAFailingShard(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents())
		ctx := context.Background()
		for _, o := range oneOwnerPerShard(s) {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
		}
		if err := b.rdb.Set(ctx, s.shards[0].Events, "not a stream", 0).Err(); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
		// The failing shard goes in the first round; the others do not wait on it.
		st, err := newSweeper(t, s).SweepOnce(ctx)
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("SweepOnce: %v, want shard 0's WRONGTYPE", err)
		}
		if st.Expired != 3 {
			t.Errorf("SweepOnce swept %d members, want 3 (shards 1 to 3)", st.Expired)
		}
		for i := 1; i < 4; i++ {
			if n := b.rdb.XLen(ctx, s.shards[i].Events).Val(); n != 1 {
				t.Errorf("shard %d: %d events, want 1", i, n)
			}
		}
	})
}

// TestSweepWrongTypeKeepsMembers: a sweep round that fails on a key of
// another type (the shard's stream, an owner's payload hash) removes nothing
// of the owner it failed on, so each of its expired members still gets its
// one event once the key is mended.
func TestSweepWrongTypeKeepsMembers(t *testing.T) {
	t.Parallel()
	for _, payloads := range []bool{false, true} {
		t.Run("payloads="+strconv.FormatBool(payloads), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b backend) {
				opts := []OpenOption{WithShards(1), WithExpiryEvents()}
				if payloads {
					opts = append(opts, WithPayloadStorage())
				}
				s, clk := newTestSet(t, b, opts...)
				ctx := context.Background()
				sk := &s.shards[0]
				d1 := must[time.Time](t)(s.Add(ctx, "o", "m1", time.Second))
				d2 := must[time.Time](t)(s.Add(ctx, "o", "m2", time.Hour))
				clk.Advance(2 * time.Second)
				broken := sk.Events
				if payloads {
					broken = sk.Payload + "o"
				}
				if err := b.rdb.Set(ctx, broken, "not mine", 0).Err(); err != nil {
					t.Fatal(err)
				}
				w := newSweeper(t, s)
				if _, err := w.sweepBatch(ctx, sk.Shard, []string{"o"}); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Fatalf("sweep over a %s of another type: %v, want WRONGTYPE", broken, err)
				}
				zs := must[[]redis.Z](t)(b.rdb.ZRangeWithScores(ctx, s.OwnerKey("o"), 0, -1).Result())
				if len(zs) != 2 || zs[0].Member != "m1" || int64(zs[0].Score) != d1.UnixMilli() ||
					zs[1].Member != "m2" || int64(zs[1].Score) != d2.UnixMilli() {
					t.Fatalf("after the failed sweep the owner holds %v, want m1 at %d and m2 at %d", zs, d1.UnixMilli(), d2.UnixMilli())
				}
				must[int64](t)(b.rdb.Del(ctx, broken).Result())
				st := must[SweepStats](t)(w.SweepOnce(ctx))
				evs := eventsOf(t, s)
				if st.Expired != 1 || len(evs) != 1 || evs[0].Member != "m1" || !evs[0].Deadline.Equal(d1) {
					t.Fatalf("once mended: %+v, events %+v; want m1's one event", st, evs)
				}
			})
		})
	}
}

// TestSweepWrongTypePayloadHashLosesNothing: on a set with events and
// payloads, whose sweep pops an owner's members before it reads their
// payloads, a payload hash of another type fails the sweep with the
// server's WRONGTYPE and puts the members popped back as they were (one due
// member, and several); once the key is fixed, they are swept into events.
func TestSweepWrongTypePayloadHashLosesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, due := range []int{1, 3} {
			s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
			for i := range due {
				must[time.Time](t)(s.Add(ctx, "o", "m"+strconv.Itoa(i), time.Duration(i+1)*time.Second, WithPayload([]byte("p"))))
			}
			must[time.Time](t)(s.Add(ctx, "o", "live", time.Hour))
			pkey := s.shards[0].Payload + "o"
			if err := b.rdb.Set(ctx, pkey, "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
			before := b.rdb.ZRangeWithScores(ctx, s.OwnerKey("o"), 0, -1).Val()
			clk.Advance(time.Duration(due+1) * time.Second)
			w := newSweeper(t, s)
			if _, err := w.SweepOnce(ctx); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("%d due: SweepOnce with a payload hash of another type: %v, want WRONGTYPE", due, err)
			}
			if after := b.rdb.ZRangeWithScores(ctx, s.OwnerKey("o"), 0, -1).Val(); !slices.Equal(after, before) {
				t.Fatalf("%d due: members after the failed sweep %v, want %v", due, after, before)
			}
			if n := b.rdb.XLen(ctx, s.shards[0].Events).Val(); n != 0 {
				t.Fatalf("%d due: %d events after the failed sweep", due, n)
			}
			if err := b.rdb.Del(ctx, pkey).Err(); err != nil {
				t.Fatal(err)
			}
			if st := must[SweepStats](t)(w.SweepOnce(ctx)); st.Expired != due {
				t.Fatalf("%d due: swept %+v once fixed", due, st)
			}
		}
	})
}
