package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestGroupsPauseResume: on every backend, groups pause and resume say
// what they changed (a second pause or resume changes nothing and says
// so), groups shows PAUSED ("1 owners" for an owner paused, "yes" for the
// group, both), and its JSON paused and paused_owners; resuming the group
// leaves its owner paused. A group no consumer has made yet can be paused:
// declared later, it is listed paused. Bad input is a usage error (exit 2),
// an unknown set exit 3.
func TestGroupsPauseResume(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 4)
		name, u := set.Name(), urlOf(t, rdb)
		declare(t, rdb, set, "billing")
		cli := func(want string, args ...string) {
			t.Helper()
			code, out, errs := runCLI(t, append(args, "--redis", u)...)
			if code != 0 || strings.TrimSpace(out) != want {
				t.Errorf("%v: exit %d, %q%s; want %q", args, code, out, errs, want)
			}
		}
		// paused reads groups: billing's PAUSED in text, and in JSON.
		paused := func(want string, wantGroup bool, wantOwners int64) {
			t.Helper()
			code, out, errs := runCLI(t, "groups", "--redis", u, name)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			// Right-aligned columns: PAUSED is what follows HELD BACK's end.
			end := strings.Index(lines[0], "HELD BACK") + len("HELD BACK")
			if code != 0 || len(lines) != 2 || strings.TrimSpace(lines[0][end:]) != "PAUSED" || len(lines[1]) < end ||
				strings.TrimSpace(lines[1][end:]) != want {
				t.Errorf("groups: exit %d:\n%s%s\nwant billing's PAUSED %q", code, out, errs, want)
			}
			code, out, errs = runCLI(t, "groups", "--json", "--redis", u, name)
			var rows []groupRowJSON
			if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Paused != wantGroup || rows[0].PausedOwners != wantOwners {
				t.Errorf("groups --json: exit %d, %s%s; want paused %v, paused_owners %d", code, out, errs, wantGroup, wantOwners)
			}
		}
		paused("", false, 0)
		shard := set.ShardOf("acme")
		cli(fmt.Sprintf(`paused owner acme in group "billing" on shard %d`, shard), "groups", "pause", name, "billing", "acme")
		cli(`owner acme in group "billing" was paused already`, "groups", "pause", name, "billing", "acme")
		paused("1 owners", false, 1)
		cli(`paused group "billing" on 4 shards`, "groups", "pause", name, "billing")
		cli(`group "billing" was paused already`, "groups", "pause", name, "billing")
		paused("yes, 1 owners", true, 1)
		cli(`resumed group "billing" on 4 shards`, "groups", "resume", name, "billing")
		cli(`group "billing" was not paused`, "groups", "resume", name, "billing")
		paused("1 owners", false, 1)
		cli(fmt.Sprintf(`resumed owner acme in group "billing" on shard %d`, shard), "groups", "resume", name, "billing", "acme")
		cli(`owner acme in group "billing" was not paused`, "groups", "resume", name, "billing", "acme")
		paused("", false, 0)

		// --json: the state asked for, and whether it changed.
		for _, tc := range []struct {
			args []string
			want pauseJSON
		}{
			{[]string{"pause", name, "billing", "user 7"}, pauseJSON{Group: "billing", Owner: "user 7", Paused: true, Changed: true, Shards: 1}},
			{[]string{"resume", name, "billing", "user 7"}, pauseJSON{Group: "billing", Owner: "user 7", Changed: true, Shards: 1}},
			{[]string{"resume", name, "billing", "user 7"}, pauseJSON{Group: "billing", Owner: "user 7", Shards: 1}},
			{[]string{"pause", name, "billing"}, pauseJSON{Group: "billing", Paused: true, Changed: true, Shards: 4}},
			{[]string{"resume", name, "billing"}, pauseJSON{Group: "billing", Changed: true, Shards: 4}},
		} {
			code, out, errs := runCLI(t, append([]string{"groups", "--redis", u, "--json"}, tc.args...)...)
			var got pauseJSON
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got != tc.want {
				t.Errorf("groups %v --json: exit %d, %s%s; want %+v", tc.args, code, out, errs, tc.want)
			}
		}

		// A group no consumer has made: paused ahead of its consumers.
		cli(`paused group "later" on 4 shards`, "groups", "pause", name, "later")
		declare(t, rdb, set, "later")
		gs, err := set.Groups(ctx)
		if err != nil || len(gs) != 2 || gs[1].Name != "later" || !gs[1].Paused {
			t.Errorf("groups after declaring later: %+v, %v; want later paused", gs, err)
		}

		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"groups", "pause", name}, 2, "want NAME GROUP [OWNER], got 1 arguments"},
			{[]string{"groups", "resume", name, "billing", "a", "b"}, 2, "want NAME GROUP [OWNER], got 4 arguments"},
			{[]string{"groups", "pause", name, "billing", ""}, 2, "leave it out to pause the whole group"},
			{[]string{"groups", "resume", name, ""}, 2, "usage"},
			{[]string{"groups", "pause", name, strings.Repeat("g", 257)}, 2, "usage"},
			{[]string{"groups", "pause", name, "billing", strings.Repeat("o", 1025)}, 2, "usage"},
			{[]string{"groups", "pause", "no-such-set", "billing"}, 3, "no set"},
		} {
			code, _, errs := runCLI(t, append(tc.args, "--redis", u)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
			}
		}
		if gs, err := set.Groups(ctx); err != nil || gs[0].Paused || gs[0].PausedOwners != 0 {
			t.Errorf("after the refusals: %+v, %v; want billing not paused", gs, err)
		}
	})
}

// declare creates consumer group group of set on every shard, as an Open
// WithConsumerGroups does.
func declare(t *testing.T, rdb redis.UniversalClient, set *expset.Set, group string) {
	t.Helper()
	if _, err := expset.Open(context.Background(), rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithConsumerGroups(group)); err != nil {
		t.Fatal(err)
	}
}
