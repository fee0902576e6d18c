package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// leverWorkloads are the script variants of bench/testdata/levers, each
// called directly (EVALSHA, or FCALL of a function library) on the same
// keys and states as the library's paths, to weigh one change at a time.
func leverWorkloads(e *env) ([]workload, error) {
	acq, err := acquireLevers(e)
	if err != nil {
		return nil, err
	}
	sw, err := sweepLevers(e)
	if err != nil {
		return nil, err
	}
	return append(acq, sw...), nil
}

// leverCall sends one acquire variant for owner and member (key is the
// owner's sorted set) and returns its reply.
type leverCall func(ctx context.Context, rdb *redis.Client, key, owner, member string) (any, error)

// A leverState is an acquire state and the status a variant must reply in
// it.
type leverState struct {
	recipeState
	status int64 // 1 added, 2 held, 0 denied
}

// acquireLevers are the acquire variants, each in the states it supports,
// compared with the copy of today's script (or, for events, with the
// library's own path) in the same state.
func acquireLevers(e *env) ([]workload, error) {
	prelude, err := e.source("levers/prelude.lua")
	if err != nil {
		return nil, err
	}
	body, err := e.source("levers/acquire.lua")
	if err != nil {
		return nil, err
	}
	all, err := e.source("levers/acquire-all.lua")
	if err != nil {
		return nil, err
	}
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	lim := strconv.Itoa(limit)
	evalsha := func(src string, args func(owner, member string) []any) leverCall {
		sc := newScript(src)
		return func(ctx context.Context, rdb *redis.Client, key, owner, member string) (any, error) {
			return sc.Run(ctx, rdb, []string{key}, args(owner, member)...).Result()
		}
	}
	fcall := func(name string, args func(owner, member string) []any) leverCall {
		return func(ctx context.Context, rdb *redis.Client, key, owner, member string) (any, error) {
			return rdb.FCall(ctx, name, []string{key}, args(owner, member)...).Result()
		}
	}
	libArgs := func(owner, member string) []any { return []any{"", ms, member, owner, "", lim} }
	clockArgs := func(owner, member string) []any {
		return []any{strconv.FormatInt(time.Now().UnixMilli(), 10), ms, member, owner, "", lim}
	}
	shortArgs := func(owner, member string) []any { return []any{ms, member, lim} }
	file := func(name string) (string, error) { return e.source("levers/" + name) }

	// The function libraries: the same body inside a function (so the
	// prelude is still built on every call), and the prelude at the
	// library's top level (built once when the library loads).
	libraries := map[string]string{
		"expsetlever_same": "#!lua name=expsetlever_same\n" +
			"redis.register_function('expsetlever_same', function(KEYS, ARGV)\n" + prelude + "\n" + body + "\nend)\n",
		"expsetlever_top": "#!lua name=expsetlever_top\n" +
			strings.Replace(prelude, "local call = redis.call", "local call -- set on each call: redis.call is not there at load time", 1) +
			"\nredis.register_function('expsetlever_top', function(KEYS, ARGV)\ncall = redis.call\n" + body + "\nend)\n",
		"expsetlever_all": "#!lua name=expsetlever_all\n" +
			"redis.register_function('expsetlever_all', function(KEYS, ARGV)\n" + all + "\nend)\n",
	}
	type variant struct {
		name, what string
		call       leverCall
		packed     bool     // one-integer reply
		events     bool     // on a set WithExpiryEvents
		states     []string // the states it runs in (nil: all)
	}
	variants := []variant{
		{name: "base-evalsha", what: "copy of internal/store/lua/prelude.lua + internal/store/lua/acquire.lua, EVALSHA (as Quota.Acquire)", call: evalsha(prelude+"\n"+body, libArgs)},
		{name: "base-fcall", what: "the same body inside a Redis Function, FCALL", call: fcall("expsetlever_same", libArgs)},
		{name: "base-fcall-top", what: "FCALL, the prelude at the library's top level (built once at load)", call: fcall("expsetlever_top", libArgs)},
	}
	for _, v := range []struct {
		file, what string
		args       func(owner, member string) []any
		packed     bool
	}{
		{"acquire-lean.lua", "no prelude: no closures or tables per run (acquire-lean.lua)", libArgs, false},
		{"acquire-lean.lua", "acquire-lean.lua with now in ARGV[1] (no TIME)", clockArgs, false},
		{"acquire-lean-argv.lua", "acquire-lean.lua with 3 ARGV instead of 6", shortArgs, false},
		{"acquire-lean-reply.lua", "acquire-lean.lua with a one-integer reply", libArgs, true},
		{"acquire-lean-ttl.lua", "acquire-lean.lua, key TTL refreshed only when short (skip taken)", libArgs, false},
		{"acquire-all.lua", "all of the above but the clock, EVALSHA", shortArgs, true},
		{"acquire-all-resp3.lua", "acquire-all.lua reading scores as numbers (RESP3)", shortArgs, true},
		{"acquire-all-noscores.lua", "acquire-all.lua reading members without scores, then one ZMSCORE of the scores it needs", shortArgs, true},
	} {
		src, err := file(v.file)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(v.file, "acquire-"), ".lua")
		if strings.Contains(v.what, "no TIME") {
			name += "-clock"
		}
		variants = append(variants, variant{name: name, what: v.what, call: evalsha(src, v.args), packed: v.packed})
	}
	variants = append(variants, variant{name: "all-fcall", what: "acquire-all.lua as a Redis Function, FCALL", call: fcall("expsetlever_all", shortArgs), packed: true})
	floor, err := file("floor-time-zadd.lua")
	if err != nil {
		return nil, err
	}
	variants = append(variants, variant{name: "floor-time-zadd", what: "floor: a script of TIME and ZADD only, EVALSHA", call: evalsha(floor, shortArgs),
		packed: true, states: []string{"fresh", "live"}})
	evsrc, err := file("acquire-all-events.lua")
	if err != nil {
		return nil, err
	}
	evsc := newScript(evsrc)
	variants = append(variants, variant{name: "all-events", what: "acquire-all.lua with events: due index, no key TTL (acquire-all-events.lua)",
		call: func(ctx context.Context, rdb *redis.Client, key, owner, member string) (any, error) {
			due := strings.TrimSuffix(key, "o:"+owner) + "due"
			return evsc.Run(ctx, rdb, []string{key, due}, ms, member, lim, owner).Result()
		}, packed: true, events: true, states: []string{"fresh", "live"}})

	states := []leverState{{stFresh, 1}, {stLive, 1}, {stRetry, 2}, {stDenied, 0}}
	var out []workload
	for _, v := range variants {
		for _, st := range states {
			if v.states != nil && !slices.Contains(v.states, st.name) {
				continue
			}
			vs := "lever/acquire/base-evalsha/" + st.name
			if v.events {
				vs = "acquire/events"
				if st.name == "fresh" {
					vs = "acquire/events-fresh"
				}
			}
			out = append(out, workload{
				name: "lever/acquire/" + v.name + "/" + st.name, unit: "call", what: v.what,
				vs: vs, state: st.name,
				prep: leverPrep(libraries, st, v.call, v.packed, v.events),
			})
		}
	}
	return out, nil
}

func leverPrep(libraries map[string]string, st leverState, call leverCall, packed, events bool) func(ctx context.Context, e *env) (job, error) {
	return func(ctx context.Context, e *env) (job, error) {
		for _, src := range libraries {
			if err := e.rdb.FunctionLoadReplace(ctx, src).Err(); err != nil {
				return job{}, fmt.Errorf("FUNCTION LOAD: %w", err)
			}
		}
		var opts []expset.OpenOption
		if events {
			opts = append(opts, expset.WithExpiryEvents())
		}
		s, err := expset.Open(ctx, e.rdb, setName, opts...)
		if err != nil {
			return job{}, err
		}
		d := time.Now().Add(ttl)
		switch {
		case st.retry:
			err = seedOf(ctx, e.rdb, s, e.owners, func(i int) []string { return []string{e.members[i]} }, d, !events, events)
		case st.held > 0:
			err = seed(ctx, e.rdb, s, e.owners, seedNames[:st.held], d, !events, events)
		}
		if err != nil {
			return job{}, err
		}
		if _, err := call(ctx, e.rdb, s.OwnerKey("warm-up"), "warm-up", "m"); err != nil {
			return job{}, err
		}
		return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
			v, err := call(ctx, e.rdb, s.OwnerKey(e.owners[i]), e.owners[i], e.members[i])
			if err != nil {
				return err
			}
			var status int64 = -1
			switch x := v.(type) {
			case int64:
				if packed {
					status = x % 4
				}
			case []any:
				if len(x) >= 4 && !packed {
					status, _ = x[0].(int64)
				}
			}
			if status != st.status {
				return fmt.Errorf("reply %v, want status %d", v, st.status)
			}
			return nil
		}}, nil
	}
}

// sweepLevers are internal/store/lua/sweep.lua's copy and its variants, driven shard by
// shard the way Sweeper.SweepOnce drives sweep.lua (without the leases):
// instructions per member reclaimed.
func sweepLevers(e *env) ([]workload, error) {
	var out []workload
	for _, v := range []struct {
		name, file, what string
		payloadKeys      bool
	}{
		{"sweep", "sweep.lua", "copy of internal/store/lua/prelude.lua + internal/store/lua/sweep.lua, driven as SweepOnce drives it", true},
		{"sweep-lean", "sweep-lean.lua", "one read per owner for drop and re-file; index written once per round; string arguments", true},
		{"sweep-lean-nopkeys", "sweep-lean.lua", "sweep-lean.lua without the payload keys declared (a set without payloads)", false},
		{"sweep-lean-1field", "sweep-lean-1field.lua", "sweep-lean.lua, each event one field instead of three", true},
	} {
		src, err := e.source("levers/" + v.file)
		if err != nil {
			return nil, err
		}
		if v.file == "sweep.lua" {
			prelude, err := e.source("levers/prelude.lua")
			if err != nil {
				return nil, err
			}
			src = prelude + "\n" + src
		}
		sc := newScript(src)
		name := v.name
		for _, c := range []struct {
			name   string
			per    int
			events bool
		}{{"events", 1, true}, {"index", 1, false}, {"events-10", 10, true}, {"index-10", 10, false}} {
			if (v.name == "sweep-lean-1field" && !c.events) || (v.name == "sweep-lean-nopkeys" && c.per > 1) {
				continue
			}
			out = append(out, workload{name: "lever/" + name + "/" + c.name, unit: "member", what: v.what,
				vs: "lever/sweep/" + c.name, prep: sweepLeverPrep(sc, c.per, c.events, v.payloadKeys)})
		}
	}
	return out, nil
}

func sweepLeverPrep(sc *redis.Script, per int, events, payloadKeys bool) func(ctx context.Context, e *env) (job, error) {
	return func(ctx context.Context, e *env) (job, error) {
		opt, flags := expset.WithSweepIndex(), "i"
		if events {
			opt, flags = expset.WithExpiryEvents(), "ei"
		}
		s, err := expset.Open(ctx, e.rdb, setName, opt)
		if err != nil {
			return job{}, err
		}
		owners, err := seedExpired(ctx, e, s, per, true)
		if err != nil {
			return job{}, err
		}
		// One owner per shard names the shard's keys.
		prefixes := map[int]string{}
		for _, o := range owners {
			prefixes[s.ShardOf(o)] = shardPrefix(s, o)
		}
		if _, err := sc.Load(ctx, e.rdb).Result(); err != nil {
			return job{}, err
		}
		want := len(owners) * per
		return job{calls: 1, units: want, do: func(ctx context.Context, _ int) error {
			got := 0
			for _, p := range prefixes {
				var due []string
				for {
					keys := []string{p + "due", p + "ev"}
					args := []any{"", flags, 1000, 100}
					for _, o := range due {
						keys = append(keys, p+"o:"+o)
						args = append(args, o)
					}
					for _, o := range due {
						if payloadKeys {
							keys = append(keys, p+"p:"+o)
						}
					}
					v, err := sc.EvalSha(ctx, e.rdb, keys, args...).Slice()
					if err != nil {
						return err
					}
					n, _ := v[1].(int64)
					got += int(n)
					due = due[:0]
					for _, x := range v[7:] {
						due = append(due, x.(string))
					}
					if len(due) == 0 {
						break
					}
				}
			}
			if got != want {
				return fmt.Errorf("swept %d members, want %d", got, want)
			}
			return nil
		}}, nil
	}
}
