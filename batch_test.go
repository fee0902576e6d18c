package expset

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAcquireMany checks that a batch decides exactly as the same Acquires
// one at a time would: owners spread over every shard (every node of a
// cluster), several requests for one owner in order, retries and denials.
func TestAcquireMany(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 2))
		var reqs []AcquireRequest
		var want []Decision
		for o := 0; o < 40; o++ {
			owner := "owner-" + strconv.Itoa(o)
			for _, m := range []string{"a", "b", "a", "c"} {
				reqs = append(reqs, AcquireRequest{Owner: owner, Member: m, TTL: time.Minute})
			}
			dl := clk.Now().Add(time.Minute)
			want = append(want,
				Decision{Allowed: true, Count: 1, Limit: 2, Deadline: dl},
				Decision{Allowed: true, Count: 2, Limit: 2, Deadline: dl},
				Decision{Allowed: true, Existing: true, Count: 2, Limit: 2, Deadline: dl},
				Decision{Count: 2, Limit: 2, RetryAfter: time.Minute})
		}
		// A per-request limit applies to its request only.
		reqs = append(reqs, AcquireRequest{Owner: "owner-0", Member: "vip", TTL: time.Minute, Options: []AcquireOption{WithLimit(3)}})
		want = append(want, Decision{Allowed: true, Count: 3, Limit: 3, Deadline: clk.Now().Add(time.Minute)})

		got, err := q.AcquireMany(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d decisions for %d requests", len(got), len(reqs))
		}
		for i := range want {
			if !equalDecision(got[i], want[i]) {
				t.Fatalf("request #%d %+v: %+v, want %+v", i, reqs[i], got[i], want[i])
			}
		}
		if n := must[int](t)(s.Count(ctx, "owner-39")); n != 2 {
			t.Fatalf("owner-39 holds %d live members, want 2", n)
		}
		if d, err := q.AcquireMany(ctx, nil); d != nil || err != nil {
			t.Fatalf("empty batch: %v, %v", d, err)
		}
	})
}

// TestAcquireManyAfterScriptFlush checks that a batch survives an empty
// script cache: the requests refused with NOSCRIPT did not run, so the
// script is loaded and they are sent once more.
func TestAcquireManyAfterScriptFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 1))
		for round := 0; round < 2; round++ {
			flushScripts(t, b.rdb)
			var reqs []AcquireRequest
			for o := 0; o < 20; o++ {
				reqs = append(reqs, AcquireRequest{Owner: "u" + strconv.Itoa(o), Member: "m" + strconv.Itoa(round), TTL: time.Minute})
			}
			got, err := q.AcquireMany(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range got {
				// Round 0 admits everyone; round 1 finds every owner at its limit.
				if d.Allowed != (round == 0) || d.Count != 1 {
					t.Fatalf("round %d request #%d: %+v", round, i, d)
				}
			}
		}
	})
}

// TestAcquireManyBadInput checks that one bad request fails the whole batch
// with its index and sentinel, before anything is sent.
func TestAcquireManyBadInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 3))
		must[time.Time](t)(s.Add(ctx, "u", "m", time.Minute))
		before := snapshot(t, b.rdb, s.Name())
		good := AcquireRequest{Owner: "u", Member: "n", TTL: time.Minute}
		for _, c := range []struct {
			bad  AcquireRequest
			want error
		}{
			{AcquireRequest{Owner: "", Member: "n", TTL: time.Minute}, ErrInvalidArgument},
			{AcquireRequest{Owner: "u", Member: "", TTL: time.Minute}, ErrInvalidArgument},
			{AcquireRequest{Owner: "u", Member: "n"}, ErrInvalidArgument},
			{AcquireRequest{Owner: "u", Member: "n", TTL: time.Minute, Options: []AcquireOption{WithLimit(0)}}, ErrInvalidArgument},
			{AcquireRequest{Owner: "u", Member: "n", TTL: time.Minute, Options: []AcquireOption{WithPayload([]byte("x"))}}, ErrInvalidArgument},
		} {
			d, err := q.AcquireMany(ctx, []AcquireRequest{good, good, c.bad, good})
			if !errors.Is(err, c.want) || d != nil {
				t.Errorf("%+v: %v, %v; want %v", c.bad, d, err, c.want)
			}
			if err != nil && !strings.Contains(err.Error(), "request #2") {
				t.Errorf("%+v: error %q does not name request #2", c.bad, err)
			}
		}
		if after := snapshot(t, b.rdb, s.Name()); !reflect.DeepEqual(before, after) {
			t.Fatalf("a rejected batch changed the data:\nbefore %v\nafter  %v", before, after)
		}
	})
}

// TestAcquireManyPartialFailure checks that a request failing in Redis (an
// owner key of another type) fails alone: the others take effect and the
// BatchError names the one that failed.
func TestAcquireManyPartialFailure(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 3))
		b.rdb.Set(ctx, s.OwnerKey("bad"), "not a zset", 0)
		reqs := []AcquireRequest{
			{Owner: "ok1", Member: "m", TTL: time.Minute},
			{Owner: "bad", Member: "m", TTL: time.Minute},
			{Owner: "ok2", Member: "m", TTL: time.Minute},
		}
		got, err := q.AcquireMany(ctx, reqs)
		var be *BatchError
		if !errors.As(err, &be) || len(be.Errs) != 3 || be.Errs[0] != nil || be.Errs[1] == nil || be.Errs[2] != nil {
			t.Fatalf("want a BatchError for request #1 only, got %v", err)
		}
		if !strings.Contains(err.Error(), "#1") {
			t.Fatalf("error %q does not name request #1", err)
		}
		if len(got) != 3 || !got[0].Allowed || got[1].Allowed || !got[2].Allowed {
			t.Fatalf("decisions %+v", got)
		}
		for _, o := range []string{"ok1", "ok2"} {
			if ok := must[bool](t)(s.Contains(ctx, o, "m")); !ok {
				t.Fatalf("%s: the successful request did not take effect", o)
			}
		}
	})
}
