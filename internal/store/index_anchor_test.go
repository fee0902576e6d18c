package store

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestSweepPassesTheAnchor: sweep.lua reads no next deadline from an index
// that holds only its anchor (IndexAnchor, +inf), and the first owner's
// deadline once one is filed.
func TestSweepPassesTheAnchor(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 1)
		if err := s.AnchorIndexes(ctx); err != nil {
			t.Fatal(err)
		}
		a := SweepArgs{Members: 100, PerRound: 100, MaxLen: 1000, MaxBytes: 1 << 30}
		if r, err := s.Sweep(ctx, a); err != nil || r.Earliest != -1 {
			t.Fatalf("Sweep of an index holding its anchor alone: earliest %d %v, want -1", r.Earliest, err)
		}
		due, put, _, err := s.Put(ctx, "", "later", 3_600_000, nil, false)
		if err != nil || !put {
			t.Fatalf("Put: %v %v", put, err)
		}
		if r, err := s.Sweep(ctx, a); err != nil || r.Earliest != due.UnixMilli() {
			t.Fatalf("Sweep: earliest %d %v, want the job's %d", r.Earliest, err, due.UnixMilli())
		}
	})
}
