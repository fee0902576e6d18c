package bench

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// A recipe is one way to admit a member under a per-owner limit: the
// library, or one of the alternatives it is measured against. Every recipe
// gets the same client, the same owners and members and the same ttl.
type recipe struct {
	name string
	// cmds are the INFO commandstats names whose server time one admission
	// costs; EXEC's time already includes the commands it runs.
	cmds []string
	open func(ctx context.Context, rdb redis.UniversalClient, tag string, limit int) (admitter, error)
}

// An admitter runs one recipe against its own keys.
type admitter interface {
	// acquire tries to admit member for owner with the given ttl. retries
	// counts optimistic transactions that had to start over.
	acquire(ctx context.Context, owner, member string, ttl time.Duration) (ok bool, retries int, err error)
	// seed gives each owner one member with the given ttl, pipelined, the way
	// the recipe itself would have stored it.
	seed(ctx context.Context, owners []string, member string, ttl time.Duration) error
	// cleanup deletes every key the admitter wrote.
	cleanup(ctx context.Context) error
}

var recipes = []recipe{
	{name: "expset", cmds: []string{"evalsha"}, open: func(ctx context.Context, rdb redis.UniversalClient, tag string, limit int) (admitter, error) {
		return openLibrary(ctx, rdb, tag, limit)
	}},
	{name: "lua-check-then-add", cmds: []string{"evalsha"}, open: openPlain(luaAdmit)},
	{name: "watch-multi", cmds: []string{"watch", "zcount", "multi", "exec", "unwatch"}, open: openPlain(watchAdmit)},
	{name: "naive-zcard-zadd", cmds: []string{"zremrangebyscore", "zcard", "zadd", "pexpire"}, open: openPlain(naiveAdmit)},
	{name: "raw-zadd", cmds: []string{"zadd"}, open: openPlain(zaddAdmit)},
}

// library is expset's Quota.Acquire on a set of its own.
type library struct {
	rdb  redis.UniversalClient
	name string
	s    *expset.Set
	q    *expset.Quota
}

func openLibrary(ctx context.Context, rdb redis.UniversalClient, tag string, limit int, opts ...expset.OpenOption) (admitter, error) {
	name := "bench-" + tag
	s, err := expset.Open(ctx, rdb, name, opts...)
	if err != nil {
		return nil, err
	}
	q, err := expset.NewQuota(s, limit)
	if err != nil {
		return nil, err
	}
	return &library{rdb: rdb, name: name, s: s, q: q}, nil
}

func (l *library) acquire(ctx context.Context, owner, member string, ttl time.Duration) (bool, int, error) {
	d, err := l.q.Acquire(ctx, owner, member, ttl)
	return d.Allowed, 0, err
}

func (l *library) seed(ctx context.Context, owners []string, member string, ttl time.Duration) error {
	reqs := make([]expset.AcquireRequest, 0, seedBatch)
	for len(owners) > 0 {
		reqs = reqs[:0]
		for _, o := range owners[:min(len(owners), seedBatch)] {
			reqs = append(reqs, expset.AcquireRequest{Owner: o, Member: member, TTL: ttl})
		}
		owners = owners[len(reqs):]
		if _, err := l.q.AcquireMany(ctx, reqs); err != nil {
			return err
		}
	}
	return nil
}

func (l *library) cleanup(ctx context.Context) error {
	_, err := expset.Drop(ctx, l.rdb, l.name)
	return err
}

const seedBatch = 1000

// plain is an alternative recipe over one bare sorted set per owner, key
// "bench:<tag>:<owner>", member -> deadline in Unix ms.
type plain struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int
	admit  func(p *plain, ctx context.Context, key, member string, ttl time.Duration) (bool, int, error)
}

func openPlain(admit func(p *plain, ctx context.Context, key, member string, ttl time.Duration) (bool, int, error)) func(context.Context, redis.UniversalClient, string, int) (admitter, error) {
	return func(_ context.Context, rdb redis.UniversalClient, tag string, limit int) (admitter, error) {
		return &plain{rdb: rdb, prefix: "bench:" + tag + ":", limit: limit, admit: admit}, nil
	}
}

func (p *plain) acquire(ctx context.Context, owner, member string, ttl time.Duration) (bool, int, error) {
	return p.admit(p, ctx, p.prefix+owner, member, ttl)
}

func (p *plain) seed(ctx context.Context, owners []string, member string, ttl time.Duration) error {
	for len(owners) > 0 {
		batch := owners[:min(len(owners), seedBatch)]
		owners = owners[len(batch):]
		d := float64(time.Now().Add(ttl).UnixMilli())
		_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, o := range batch {
				pl.ZAdd(ctx, p.prefix+o, redis.Z{Score: d, Member: member})
				pl.PExpire(ctx, p.prefix+o, ttl)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *plain) cleanup(ctx context.Context) error {
	return unlinkMatching(ctx, p.rdb, p.prefix+"*")
}

// unlinkMatching deletes the keys matching pattern (a single server).
func unlinkMatching(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, keys...).Err()
		keys = keys[:0]
		return err
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// zaddAdmit is the floor: one round trip, one write, no check at all (it
// admits everything, so it over-admits whenever there is a limit to keep).
func zaddAdmit(p *plain, ctx context.Context, key, member string, ttl time.Duration) (bool, int, error) {
	d := float64(time.Now().Add(ttl).UnixMilli())
	err := p.rdb.ZAdd(ctx, key, redis.Z{Score: d, Member: member}).Err()
	return err == nil, 0, err
}

// naiveAdmit is the recipe found in the wild: drop expired members and count
// in one pipeline, then add and set the key TTL in another, "now" from the
// application's clock. Two round trips, and nothing stops two callers from
// both seeing limit-1 and both adding.
func naiveAdmit(p *plain, ctx context.Context, key, member string, ttl time.Duration) (bool, int, error) {
	now := time.Now()
	var card *redis.IntCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		card = pl.ZCard(ctx, key)
		return nil
	})
	if err != nil {
		return false, 0, err
	}
	if card.Val() >= int64(p.limit) {
		return false, 0, nil
	}
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.ZAdd(ctx, key, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: member})
		pl.PExpire(ctx, key, ttl)
		return nil
	})
	return err == nil, 0, err
}

// maxTxRetries bounds the optimistic retries of watchAdmit.
const maxTxRetries = 1000

// watchAdmit is the optimistic-transaction recipe: WATCH the owner key, count
// its live members, and MULTI/EXEC the drop+add+TTL only if the key did not
// change meanwhile; a conflict starts over. Correct, but each attempt is
// WATCH, ZCOUNT, MULTI..EXEC and UNWATCH, and hot owners retry.
func watchAdmit(p *plain, ctx context.Context, key, member string, ttl time.Duration) (bool, int, error) {
	for retries := 0; retries < maxTxRetries; retries++ {
		admitted := false
		err := p.rdb.Watch(ctx, func(tx *redis.Tx) error {
			now := time.Now()
			n, err := tx.ZCount(ctx, key, "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
			if err != nil || n >= int64(p.limit) {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
				pl.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
				pl.ZAdd(ctx, key, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: member})
				pl.PExpire(ctx, key, ttl)
				return nil
			})
			admitted = err == nil
			return err
		}, key)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		return admitted, retries, err
	}
	return false, maxTxRetries, errors.New("watch-multi: too many retries")
}

// plainScript is the straightforward Lua check-then-add: the server's TIME,
// drop expired members, count, add, set the key TTL. Atomic like expset's,
// without retries of a held member, eviction, payloads or a due index.
var plainScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

func luaAdmit(p *plain, ctx context.Context, key, member string, ttl time.Duration) (bool, int, error) {
	n, err := plainScript.Run(ctx, p.rdb, []string{key}, p.limit, ttl.Milliseconds(), member).Int()
	return n == 1, 0, err
}
