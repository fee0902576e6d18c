package expset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Consumers in other processes killed (SIGKILL) or shut down (SIGTERM)
// in a handler call or before their acknowledgements went out (the helper
// process: kill_test.go).

// TestKillConsumerBeforeAck kills a consumer process (SIGKILL) whose handler
// has received an event and not returned, so it never acknowledged it (nor
// the rest of the batch it had read). A consumer of the same group in this
// process then handles every event: the one in the dead consumer's handler
// comes again with Attempt 2, the rest of what it had read with Attempt 1
// (no handler call had used an attempt on them), none before the
// lease TTL counted from the dead consumer's start, and all are
// acknowledged: none is lost or dead-lettered, the streams end empty with
// nothing pending.
func TestKillConsumerBeforeAck(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 30
		const vis = time.Second
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seeded := seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
			t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
		}

		h := startHelper(t, "consumer", append(b.env(s), helperVis+"="+vis.String())...)
		startLine := h.waitLine("the start line", func(l string) bool { return strings.HasPrefix(l, "start ") })
		got := h.waitLine("an event", func(l string) bool { return strings.HasPrefix(l, "got ") })
		h.kill()
		startNs, _ := strconv.ParseInt(strings.Fields(startLine)[1], 10, 64)
		started := time.Unix(0, startNs)
		gotID := strings.Fields(got)[1] + "/" + strings.Fields(got)[2]

		// What the dead consumer held: everything its last read delivered.
		doomed := map[string]bool{}
		// Stream IDs are unique within a shard's stream only.
		for i, sk := range s.shards {
			p, err := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sk.Events, Group: "g", Start: "-", End: "+", Count: 1000, Consumer: "doomed"}).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p {
				doomed[strconv.Itoa(i)+"/"+e.ID] = true
			}
		}
		if !doomed[gotID] {
			t.Fatalf("the event the handler got (%s) is not pending on the dead consumer: %v", gotID, doomed)
		}

		var rec recorder
		handled := map[string]time.Time{}
		var mu sync.Mutex
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			mu.Lock()
			if id := eventKey(e); handled[id].IsZero() {
				handled[id] = time.Now()
			}
			mu.Unlock()
			rec.add(e)
			return nil
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond))
		waitHealed(t, "every event handled and acknowledged", killWait, func() error {
			for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
				if st.Events != 0 || st.Pending != 0 || st.Dead != 0 {
					return fmt.Errorf("shard %d: %d events, %d pending, %d dead", st.Shard, st.Events, st.Pending, st.Dead)
				}
			}
			return nil
		})
		stop()

		members := map[string]int{}
		var first time.Duration = -1
		for _, e := range rec.events() {
			id := eventKey(e)
			members[e.Owner+"/"+e.Member]++
			if !e.Deadline.Equal(seeded[e.Owner][e.Member]) {
				t.Errorf("event %+v: deadline, want %v", e, seeded[e.Owner][e.Member])
			}
			// Only the event whose handler call the kill cut short used an
			// attempt; the rest of the batch the dead consumer had read
			// was never handed to its handler.
			switch {
			case id == gotID && e.Attempt != 2:
				t.Errorf("event %s was in the dead consumer's handler, redelivered with attempt %d, want 2", id, e.Attempt)
			case id != gotID && e.Attempt != 1:
				t.Errorf("event %s never reached a handler before, attempt %d, want 1", id, e.Attempt)
			}
			if doomed[id] {
				// Delivered to the dead consumer after it started, so not
				// claimable before start + lease TTL (Redis counts idle
				// time in whole ms: 2ms of tolerance).
				wait := handled[id].Sub(started)
				if wait < vis-2*time.Millisecond {
					t.Errorf("event %s redelivered %v after the dead consumer started, before the %v lease TTL", id, wait, vis)
				}
				if first < 0 || wait < first {
					first = wait
				}
			}
		}
		if len(members) != n {
			t.Fatalf("%d of %d members' events handled", len(members), n)
		}
		if d := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0)); len(d) != 0 {
			t.Fatalf("dead letters: %+v", d)
		}
		t.Logf("%s: the dead consumer held %d of %d events; the heir handled %d deliveries, the first redelivery %v after the dead consumer started (lease TTL %v)",
			b.name, len(doomed), n, rec.len(), first.Round(time.Millisecond), vis)
	})
}

// helperWorker is the worker role of TestHelperProcess.
func helperWorker(s *Set) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	hangAt, _ := strconv.Atoi(os.Getenv(helperHangAt))
	group, fail := os.Getenv(helperGroup), os.Getenv(helperFail)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	calls := 0
	fmt.Println("start")
	return s.Consume(ctx, group, os.Getenv(helperName), func(_ context.Context, e Expiry) error {
		calls++
		fmt.Printf("call %d %s %d\n", e.Shard, e.ID, e.Attempt)
		if hangAt > 0 && calls >= hangAt {
			time.Sleep(time.Hour) // SIGKILLed in here
		}
		time.Sleep(5 * time.Millisecond)
		if e.Owner == fail {
			fmt.Printf("fail %d %s %d\n", e.Shard, e.ID, e.Attempt)
			return errors.New("always fails")
		}
		fmt.Printf("ok %d %s %d\n", e.Shard, e.ID, e.Attempt)
		return nil
	}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(2), WithReadBatch(10))
}

// TestKillConsumersTwoGroups: two consumer groups on one set, "billing" and
// "email" (declared), each with a worker process SIGKILLed in a handler call
// and another shut down gracefully (SIGTERM) in the middle of a batch; every
// email handler call of one owner's event fails. Consumers of both groups in
// this process then finish. Each group handled every event (email all but
// the failing one), that one is the only dead letter, after its 2 attempts
// (2 failing calls, or a failing call and one a kill cut short); no event
// is dead-lettered without a failing handler call, none is
// both handled and dead-lettered, and the events whose handler calls the
// kills cut short were handled afterwards at attempt 2, every other event
// (also those the graceful shutdown released) at attempt 1.
func TestKillConsumersTwoGroups(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 60
		const vis = 500 * time.Millisecond
		const failing = "o7"
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents(), WithConsumerGroups("billing", "email")))
		seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
			t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
		}

		var mu sync.Mutex
		calls := map[string][]string{} // group/shard/ID -> "ok@attempt", "fail@attempt", "cut@attempt" per call
		record := func(group string, lines []string) {
			mu.Lock()
			defer mu.Unlock()
			started := map[string]string{}
			for _, l := range lines {
				f := strings.Fields(l) // kind shard ID attempt
				k := group + "/" + f[1] + "/" + f[2]
				switch f[0] {
				case "call":
					started[k] = f[3]
				default:
					calls[k] = append(calls[k], f[0]+"@"+f[3])
					delete(started, k)
				}
			}
			for k, a := range started {
				calls[k] = append(calls[k], "cut@"+a)
			}
		}
		for _, group := range []string{"billing", "email"} {
			env := append(b.env(s), helperVis+"="+vis.String(), helperGroup+"="+group, helperFail+"="+failing)
			killed := startHelper(t, "worker", append(env, helperName+"=killed", helperHangAt+"=4")...)
			killed.waitLine("a hung call", func(l string) bool { return len(killed.calls("call")) >= 4 })
			killed.kill()
			record(group, killed.calls("call", "ok", "fail"))

			graceful := startHelper(t, "worker", append(env, helperName+"=graceful")...)
			graceful.waitLine("five calls", func(string) bool { return len(graceful.calls("ok", "fail")) >= 5 })
			graceful.term()
			if !graceful.cmd.ProcessState.Success() {
				t.Fatalf("%s: the gracefully stopped worker exited with %v; stderr:\n%s", group, graceful.cmd.ProcessState, graceful.stderr.String())
			}
			record(group, graceful.calls("call", "ok", "fail"))
		}

		// Consumers of both groups finish the work.
		var stops []func()
		for _, group := range []string{"billing", "email"} {
			stops = append(stops, consumeInBackground(t, s, group, "heir", func(_ context.Context, e Expiry) error {
				kind, err := "ok", error(nil)
				if e.Owner == failing && group == "email" {
					kind, err = "fail", errors.New("always fails")
				}
				record(group, []string{fmt.Sprintf("%s %d %s %d", kind, e.Shard, e.ID, e.Attempt)})
				return err
			}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(2)))
		}
		waitHealed(t, "every event handled or buried by both groups", killWait, func() error {
			for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
				if st.Events != 0 || st.Pending != 0 {
					return fmt.Errorf("shard %d: %d events, %d pending", st.Shard, st.Events, st.Pending)
				}
			}
			return nil
		})
		for _, stop := range stops {
			stop()
		}

		dead := map[string]bool{}
		for _, d := range must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0)) {
			dead[d.Group+"/"+eventKey(d.Event)] = true
			if d.Group != "email" || d.Event.Owner != failing || d.Event.Attempt != 2 || d.Error != "always fails" {
				t.Errorf("dead letter %+v", d)
			}
		}
		if len(dead) != 1 {
			t.Errorf("%d dead letters, want 1", len(dead))
		}
		mu.Lock()
		defer mu.Unlock()
		cut := 0
		handled := map[string]int{}
		for k, cs := range calls {
			group := strings.SplitN(k, "/", 2)[0]
			oks, fails := 0, 0
			for _, c := range cs {
				switch {
				case strings.HasPrefix(c, "ok@"):
					oks++
				case strings.HasPrefix(c, "fail@"):
					fails++
				case strings.HasPrefix(c, "cut@"):
					cut++
					// The next call is attempt 2: ok, or the failing
					// event's second and last failure.
					if !slices.Contains(cs, "ok@2") && !(dead[k] && slices.Contains(cs, "fail@2")) {
						t.Errorf("%s: a kill cut its call short, then %v; want attempt 2 next", k, cs)
					}
				}
			}
			if oks > 0 {
				handled[group]++
			}
			if fails == 0 && !slices.ContainsFunc(cs, func(c string) bool { return strings.HasPrefix(c, "cut@") }) && !slices.Contains(cs, "ok@1") {
				t.Errorf("%s: calls %v; want ok at attempt 1 (the graceful shutdown charged nothing)", k, cs)
			}
			cuts := 0
			for _, c := range cs {
				if strings.HasPrefix(c, "cut@") {
					cuts++
				}
			}
			if dead[k] && (oks > 0 || fails+cuts != 2 || fails == 0) {
				t.Errorf("%s dead-lettered after calls %v", k, cs)
			}
			if !dead[k] && oks == 0 {
				t.Errorf("%s: never handled, not dead-lettered: %v", k, cs)
			}
		}
		if handled["billing"] != n || handled["email"] != n-1 {
			t.Errorf("handled %v, want billing %d and email %d", handled, n, n-1)
		}
		if cut != 2 {
			t.Errorf("%d calls cut short by a kill, want 2", cut)
		}
		t.Logf("%s: %d events handled by billing, %d by email, 1 dead letter; calls %d", b.name, handled["billing"], handled["email"], len(calls))
	})
}

// helperAcker is the acker role of TestHelperProcess: Consume as consumer
// "dying" of group "g" with WithMaxAttempts(1), a handler that takes 5ms and
// prints "ok <shard> <ID>" as it returns nil; at the fourth call the
// process SIGKILLs itself, well inside the acknowledgement-batching window
// (100ms) of the three before.
func helperAcker(s *Set, say func(string, ...any)) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	calls := 0
	return s.Consume(context.Background(), "g", "dying", func(_ context.Context, e Expiry) error {
		if calls++; calls == 4 {
			// A call begins once the last one's slot is free, which is
			// once its acknowledgement has gone (a last attempt's goes
			// at once): the three handled are acknowledged, this one
			// is cut short.
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		time.Sleep(5 * time.Millisecond)
		say("ok %d %s", e.Shard, e.ID)
		return nil
	}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(1), WithReadBatch(10))
}

// TestKillAfterHandledNotDeadLettered: a consumer process with
// WithMaxAttempts(1) is SIGKILLed a few milliseconds after its handler
// returned nil three times, inside the acknowledgements' batching window. A consumer of the group
// in this process then finishes: no event whose handler returned nil is
// dead-lettered (only one whose call the kill cut short may be), and every
// event is handled or dead-lettered.
func TestKillAfterHandledNotDeadLettered(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 50
		const vis = 500 * time.Millisecond
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(1), WithExpiryEvents()))
		seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
			t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
		}
		h := startHelper(t, "acker", append(b.env(s), helperVis+"="+vis.String())...)
		<-h.exited
		handled := map[string]bool{}
		for _, l := range h.calls("ok") {
			f := strings.Fields(l)
			handled[f[1]+"/"+f[2]] = true
		}
		if len(handled) < 3 {
			t.Fatalf("the helper handled %d events before it died, want 3 or more; stderr:\n%s", len(handled), h.stderr.String())
		}
		heir := newHandledBy()
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			return heir.call("heir", e, nil)
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(1))
		waitFor(t, "every event handled or dead-lettered", func() bool { return drained(s) })
		stop()
		dead := deadKeys(t, s)
		for k := range dead {
			if handled[k] {
				t.Errorf("%s: its handler returned nil, yet it was dead-lettered", k)
			}
		}
		all := map[string]bool{}
		for k := range handled {
			all[k] = true
		}
		for _, e := range heir.events() {
			all[eventKey(e)] = true
		}
		for k := range dead {
			all[k] = true
		}
		if len(all) != n {
			t.Errorf("%d of %d events handled or dead-lettered", len(all), n)
		}
		t.Logf("%s: the killed consumer handled %d, the heir %d, %d dead letters (calls the kill cut short)", b.name, len(handled), len(heir.events()), len(dead))
	})
}
