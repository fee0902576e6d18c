package expset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	none := func(time.Duration) time.Duration { return 0 }
	all := func(d time.Duration) time.Duration { return d }
	b := backoff{min: 100 * time.Millisecond, max: time.Second, jitter: none}
	var got []time.Duration
	for range 6 {
		got = append(got, b.fail())
	}
	want := []time.Duration{50, 100, 200, 400, 500, 500}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("no jitter: waits %v, want %v ms", got, want)
		}
	}
	if !b.failing() {
		t.Fatal("failing() false after failures")
	}
	b.ok()
	if b.failing() {
		t.Fatal("failing() true after ok")
	}
	b.jitter = all
	if d := b.fail(); d != 100*time.Millisecond {
		t.Fatalf("first wait after ok, full jitter: %v, want 100ms", d)
	}
	// A jitter function out of range is clamped to [d/2, d].
	b = backoff{min: 100 * time.Millisecond, max: time.Second, jitter: func(d time.Duration) time.Duration { return 10 * d }}
	if d := b.fail(); d != 100*time.Millisecond {
		t.Fatalf("clamped jitter: %v, want 100ms", d)
	}
	b = backoff{min: 100 * time.Millisecond, max: time.Second, jitter: func(time.Duration) time.Duration { return -time.Hour }}
	if d := b.fail(); d != 50*time.Millisecond {
		t.Fatalf("negative jitter: %v, want 50ms", d)
	}
}

func TestBackoffDefaultsStayInRange(t *testing.T) {
	t.Parallel()
	var b backoff
	lo := retryMin / 2
	for i := range 200 {
		d := b.fail()
		if d < lo || d > retryMax {
			t.Fatalf("wait %d: %v outside [%v, %v]", i, d, lo, retryMax)
		}
		lo = min(lo*2, retryMax/2)
	}
}

func TestCannotHeal(t *testing.T) {
	t.Parallel()
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, fmt.Errorf("expset: consume: %w", ErrInvalidArgument), true},
		{live, fmt.Errorf("x: %w", ErrInvalidArgument), true},
		{live, fmt.Errorf("x: %w", ErrInvalidArgument), true},
		{live, fmt.Errorf("x: %w", ErrInvalidArgument), true},
		{live, fmt.Errorf("x: %w", ErrConfigMismatch), true},
		{live, shardErr(3, fmt.Errorf("x: %w", ErrInvalidArgument)), true},
		{live, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{live, errors.New("LOADING Redis is loading the dataset in memory"), false},
		{live, errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{live, errors.New("NOGROUP No such key or consumer group"), false},
		{live, errors.New("CROSSSLOT Keys in request don't hash to the same slot"), false},
		{live, context.DeadlineExceeded, false}, // a call's own timeout, not the loop's
		{live, fmt.Errorf("x: %w", errUnexpectedReply), false},
		{ended, errors.New("connection refused"), true},
	} {
		if got := cannotHeal(c.ctx, c.err); got != c.want {
			t.Errorf("cannotHeal(ctx err %v, %v) = %v, want %v", c.ctx.Err(), c.err, got, c.want)
		}
	}
}

func TestShardErr(t *testing.T) {
	t.Parallel()
	if shardErr(1, nil) != nil {
		t.Fatal("shardErr of nil is not nil")
	}
	base := errors.New("WRONGTYPE")
	err := fmt.Errorf("wrapped: %w", shardErr(7, base))
	if errShard(err) != 7 || !errors.Is(err, base) || err.Error() != "wrapped: WRONGTYPE" {
		t.Fatalf("errShard %d, Is %v, text %q", errShard(err), errors.Is(err, base), err.Error())
	}
	if errShard(base) != -1 {
		t.Fatalf("errShard of an untagged error: %d", errShard(base))
	}
}

// logLines parses the lines a text slog handler wrote to buf.
func logLines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestErrorLogRateLimitsPerOpAndShard(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clk := newFakeClock()
	l := &errorLog{logger: slog.New(slog.NewTextHandler(&buf, nil)), every: 10 * time.Second, now: clk.Now}
	ctx := context.Background()
	boom := errors.New("boom")
	for range 5 {
		l.log(ctx, "orders", "sweep", 2, boom, time.Second)
	}
	l.log(ctx, "orders", "sweep", 3, boom, time.Second) // another shard: its own line
	l.log(ctx, "orders", "lease", 2, boom, time.Second) // another op: its own line
	lines := logLines(&buf)
	if len(lines) != 3 {
		t.Fatalf("logged %d lines, want 3:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"level=WARN", "set=orders", "op=sweep", "shard=2", "err=boom", "retry=1s", "suppressed=0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("first line %q lacks %q", lines[0], want)
		}
	}
	clk.Advance(9 * time.Second)
	l.log(ctx, "orders", "sweep", 2, boom, time.Second)
	if n := len(logLines(&buf)); n != 3 {
		t.Fatalf("logged again before the interval: %d lines", n)
	}
	clk.Advance(time.Second)
	l.log(ctx, "orders", "sweep", 2, boom, time.Second)
	lines = logLines(&buf)
	if len(lines) != 4 || !strings.Contains(lines[3], "suppressed=5") {
		t.Fatalf("after the interval, want a 4th line counting 5 suppressed:\n%s", buf.String())
	}
}

func TestReportErrorGoesToTheHookElseToSlog(t *testing.T) {
	var got []errorReport
	s := &Set{name: "orders", errLog: &errorLog{}, hooks: Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
		e := errorReport{ci, retry}
		got = append(got, e)
	}}}
	boom := errors.New("boom")
	ctx := context.Background()
	s.reportError(ctx, "sweep", 4, boom, time.Second)
	s.reportError(ctx, "sweep", 4, boom, time.Second) // the hook sees every error
	if len(got) != 2 || got[0] != (errorReport{CallInfo{Set: "orders", Op: "sweep", Shard: 4, Err: boom}, time.Second}) {
		t.Fatalf("hook got %+v", got)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	s.reportError(ended, "sweep", 4, boom, time.Second)
	if len(got) != 2 {
		t.Fatal("reported an error after ctx ended")
	}

	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	s = &Set{name: "orders", errLog: &errorLog{}}
	s.reportError(ctx, "consume", -1, boom, time.Second)
	if lines := logLines(&buf); len(lines) != 1 || !strings.Contains(lines[0], "shard=-1") || !strings.Contains(lines[0], "level=WARN") {
		t.Fatalf("default report wrote %q", buf.String())
	}
}

func TestLoopRetriesWhatCanHealAndReturnsMisuse(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reported []errorReport
	s := &Set{name: "orders", errLog: &errorLog{}, hooks: Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
		e := errorReport{ci, retry}
		mu.Lock()
		reported = append(reported, e)
		mu.Unlock()
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := 0
	refused := errors.New("connection refused")
	err := s.loop(ctx, "consume", nil, func() (time.Duration, error) {
		calls++
		switch calls {
		case 1:
			return 0, refused
		case 2:
			return 0, shardErr(5, refused)
		case 3:
			return time.Millisecond, nil
		}
		return 0, fmt.Errorf("consume: %w", ErrInvalidArgument)
	})
	if !errors.Is(err, ErrInvalidArgument) || calls != 4 {
		t.Fatalf("loop returned %v after %d rounds, want ErrInvalidArgument after 4", err, calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 2 || reported[0].Shard != -1 || reported[1].Shard != 5 || reported[0].Op != "consume" ||
		reported[0].Retry < retryMin/2 || reported[1].Retry < retryMin {
		t.Fatalf("reported %+v", reported)
	}

	// ctx ending ends the loop with nil, whatever the round returned.
	ctx2, cancel2 := context.WithCancel(context.Background())
	err = s.loop(ctx2, "consume", nil, func() (time.Duration, error) {
		cancel2()
		return 0, refused
	})
	if err != nil || len(reported) != 2 {
		t.Fatalf("loop after cancel: %v, %d reports", err, len(reported))
	}
}
