package expset

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
)

// TestIndexAnchor: Open files the anchor (store.IndexAnchor) at +inf in
// every shard's due index of a set with expiry events, which keeps each a
// skip list; it is no owner to any read: the sweeper finds nothing due and
// no next deadline in an index holding only it, Stats counts no owner, and
// the index of a set without events (with or without WithSweepIndex) gets
// no anchor and no key at Open.
func TestIndexAnchor(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		for i, sk := range s.shards {
			if score, err := b.rdb.ZScore(ctx, sk.Due, store.IndexAnchor).Result(); err != nil || !math.IsInf(score, 1) {
				t.Fatalf("the anchor of %s: %v %v, want +inf", sk.Due, score, err)
			}
			if b.mr == nil {
				if enc := b.rdb.ObjectEncoding(ctx, sk.Due).Val(); enc != "skiplist" {
					t.Fatalf("%s is a %s, want a skiplist", sk.Due, enc)
				}
			}
			if _, ok, err := s.st.DueHead(ctx, i); ok || err != nil {
				t.Fatalf("DueHead of an index holding only its anchor: %v %v, want none", ok, err)
			}
		}
		st, err := newSweeper(t, s).SweepOnce(ctx)
		if err != nil || st.Expired != 0 || st.Stale != 0 {
			t.Fatalf("SweepOnce of an index holding only its anchor: %+v %v", st, err)
		}
		must[time.Time](t)(s.Add(ctx, "u", "m", time.Second))
		clk.Advance(2 * time.Second)
		if st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx)); st.Expired != 1 {
			t.Fatalf("SweepOnce: %+v, want 1 expired", st)
		}
		stats := must[[]ShardStats](t)(s.Stats(ctx))
		for i, sh := range stats {
			if sh.Owners != 0 || sh.OwnersDue != 0 {
				t.Fatalf("Stats of shard %d: %+v, want no owner", i, sh)
			}
		}
		for _, opts := range [][]OpenOption{nil, {WithSweepIndex()}} {
			plain, _ := newTestSet(t, b, append([]OpenOption{WithShards(2)}, opts...)...)
			for _, sk := range plain.shards {
				if n := b.rdb.Exists(ctx, sk.Due).Val(); n != 0 {
					t.Fatalf("a set without events has %s after Open", sk.Due)
				}
			}
		}
	})
}
