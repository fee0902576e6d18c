package bench

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireBefore is the acquire script as it was before this package tuned
// it, with the same KEYS and ARGV, to measure both in one run.
//
//go:embed testdata/acquire-dd7b64a.lua
var acquireBefore string

var scriptBefore = redis.NewScript(acquireBefore)

// timeZaddScript is the least a server-clock script can do: read TIME and
// add one member.
var timeZaddScript = redis.NewScript(`
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1]), ARGV[2])
return 1
`)

// A scriptCase is one way to admit, measured by the server time of its one
// command per admission.
type scriptCase struct {
	name string
	cmd  string // the INFO commandstats name of the one command it sends
	// seed gives each owner n members; call makes one admission.
	seed func(ctx context.Context, owners []string, n int) error
	call func(ctx context.Context, owner, member string) error
}

const serverTimeBlock = 250

// BenchmarkServerTime measures the server's own time per admission (INFO
// commandstats usec per call) of expset's acquire script, the same script
// before this package tuned it, the straightforward Lua check-then-add, a
// script that only reads TIME and does one ZADD, and a raw ZADD. All run on
// one connection, one call at a time, in interleaved blocks of 250 calls
// (stats reset before each block), so load from other processes hits all
// alike. Paths: common (the owner holds one member, limit 3: allowed,
// nothing expired), fresh (the owner's first member), denied (the owner is
// at the limit). Metrics: <case>-us per call, and the ratios the targets
// are stated in.
func BenchmarkServerTime(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		if !srv.real {
			b.Skip("INFO commandstats is real Redis only")
		}
		for _, path := range []struct {
			name string
			held int
		}{{"common", 1}, {"fresh", 0}, {"denied", 3}} {
			b.Run(path.name, func(b *testing.B) { runServerTime(b, srv, path.held) })
		}
	})
}

func runServerTime(b *testing.B, srv server, held int) {
	ctx := context.Background()
	const limit, ttl = 3, time.Minute
	tag := uniqueTag("servertime")
	lib, err := openLibrary(ctx, srv.rdb, tag, limit)
	fatalIf(b, err, "open")
	l := lib.(*library)
	pl := &plain{rdb: srv.rdb, prefix: "bench:" + tag + ":", limit: limit}
	defer func() {
		fatalIf(b, l.cleanup(ctx), "cleanup")
		fatalIf(b, pl.cleanup(ctx), "cleanup")
	}()
	seedLib := func(ctx context.Context, owners []string, n int) error {
		for i := 0; i < n; i++ {
			if err := l.seed(ctx, owners, "seed"+strconv.Itoa(i), ttl); err != nil {
				return err
			}
		}
		return nil
	}
	seedPlain := func(ctx context.Context, owners []string, n int) error {
		for i := 0; i < n; i++ {
			if err := pl.seed(ctx, owners, "seed"+strconv.Itoa(i), ttl); err != nil {
				return err
			}
		}
		return nil
	}
	s := l.s
	ms := ttl.Milliseconds()
	cases := []scriptCase{
		{name: "expset", cmd: "evalsha", seed: seedLib, call: func(ctx context.Context, owner, member string) error {
			_, err := l.q.Acquire(ctx, owner, member, ttl)
			return err
		}},
		{name: "expset-dd7b64a", cmd: "evalsha", seed: seedLib, call: func(ctx context.Context, owner, member string) error {
			key := s.OwnerKey(owner)
			shard := strings.TrimSuffix(key, "o:"+owner)
			keys := []string{key, shard + "due", shard + "ev", shard + "p:" + owner}
			return scriptBefore.Run(ctx, srv.rdb, keys, "", ms, member, owner, "", limit).Err()
		}},
		{name: "lua", cmd: "evalsha", seed: seedPlain, call: func(ctx context.Context, owner, member string) error {
			_, _, err := luaAdmit(pl, ctx, pl.prefix+owner, member, ttl)
			return err
		}},
		{name: "time-zadd", cmd: "evalsha", seed: seedPlain, call: func(ctx context.Context, owner, member string) error {
			return timeZaddScript.Run(ctx, srv.rdb, []string{pl.prefix + owner}, ms, member).Err()
		}},
		{name: "zadd", cmd: "zadd", seed: seedPlain, call: func(ctx context.Context, owner, member string) error {
			_, _, err := zaddAdmit(pl, ctx, pl.prefix+owner, member, ttl)
			return err
		}},
	}
	// Load every script and warm the connection.
	for _, c := range cases {
		fatalIf(b, c.call(ctx, "warm-up", "m"), c.name)
	}

	usec := make([]float64, len(cases))
	calls := make([]int64, len(cases))
	b.ResetTimer()
	for round := 0; round*serverTimeBlock < b.N; round++ {
		for ci, c := range cases {
			b.StopTimer()
			owners := names("r"+strconv.Itoa(round)+"-"+c.name+"-", serverTimeBlock)
			fatalIf(b, c.seed(ctx, owners, held), "seed "+c.name)
			resetStats(ctx, b, srv)
			b.StartTimer()
			for _, o := range owners {
				fatalIf(b, c.call(ctx, o, "new"), c.name)
			}
			b.StopTimer()
			u, n := serverMicros(ctx, b, srv, []string{c.cmd})
			usec[ci] += u
			calls[ci] += n
			b.StartTimer()
		}
	}
	b.StopTimer()
	per := map[string]float64{}
	for ci, c := range cases {
		per[c.name] = usec[ci] / float64(calls[ci])
		b.ReportMetric(per[c.name], c.name+"-us")
	}
	b.ReportMetric(per["expset"]/per["lua"], "expset/lua")
	b.ReportMetric(per["expset"]/per["zadd"], "expset/zadd")
	b.ReportMetric(per["expset-dd7b64a"]/per["lua"], "dd7b64a/lua")
	b.ReportMetric(per["lua"]/per["zadd"], "lua/zadd")
	b.ReportMetric(per["time-zadd"]/per["zadd"], "time-zadd/zadd")
}
