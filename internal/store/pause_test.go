package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestPausedOwnersScan: PausedOwners reads attempts hashes holding more
// fields than one HSCAN call walks (on a real server: several rounds per
// shard, the cursor followed to its end), and lists only the owners
// paused in the group asked for, of every shard: not those of a group its
// escaped name would match as a pattern, nor the events' fields or the
// group's own pause; Pauses finds every group's pause there, made or not.
func TestPausedOwnersScan(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 2)
		events := map[string]any{}
		for i := range 2*MaxBatch + 500 {
			events[fmt.Sprintf("%d-0 g*", 1700000000000+i)] = "1 token"
		}
		for _, sk := range s.Shards() {
			if err := rdb.HSet(ctx, sk.Att, events).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var want []string
		for i := range 40 {
			owner := fmt.Sprintf("owner-%02d", i)
			want = append(want, owner)
			for _, group := range []string{"g*", "gx"} {
				if _, err := s.Pause(ctx, []int{s.ShardOf(owner)}, group, owner, true); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Pause(ctx, []int{0, 1}, "g*", "", true); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(t.Name(), "/miniredis") { // miniredis returns a whole hash at once
			if _, next, err := rdb.HScan(ctx, s.Shards()[0].Att, 0, "*", MaxBatch).Result(); err != nil || next == 0 {
				t.Fatalf("one HSCAN call read the whole hash (cursor %d, %v): the test needs more fields", next, err)
			}
		}
		for _, group := range []string{"g*", "gx"} {
			got, err := s.PausedOwners(ctx, group)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("PausedOwners(%q) = %q, %v; want %q", group, got, err, want)
			}
		}
		if got, err := s.PausedOwners(ctx, "g"); err != nil || got != nil {
			t.Errorf("PausedOwners of a group with none paused: %q, %v", got, err)
		}
		wantPauses := map[string]PauseState{"g*": {Group: true, Owners: 40}, "gx": {Owners: 40}}
		if got, err := s.Pauses(ctx); err != nil || !maps.Equal(got, wantPauses) {
			t.Errorf("Pauses = %v, %v; want %v", got, err, wantPauses)
		}
	})
}
