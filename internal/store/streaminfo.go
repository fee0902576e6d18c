package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// streaminfo.go reads what the expset command's web page shows of each
// shard's streams: their counters, their consumer groups and, in detail,
// the groups' consumers and lags.

// StreamInfo is what ReadStreamInfo reads of one shard.
type StreamInfo struct {
	Events *redis.XInfoStream // the event stream's XINFO STREAM; nil when there is none
	Dead   *redis.XInfoStream // the dead-letter stream's; nil when there is none
	Groups []GroupDetail      // the event stream's groups
}

// GroupDetail is one group of one shard's event stream. With detail, Lag
// is its lag (Redis's, or where Redis cannot tell it the entries after the
// group's last delivered one, counted up to lagCount: LagMore when there
// were more), and Consumers its consumers (none when the group or stream
// went in between).
type GroupDetail struct {
	redis.XInfoGroup
	Lag       int64
	LagMore   bool
	Consumers []redis.XInfoConsumer
}

// ReadStreamInfo reads every shard's stream counters and consumer groups
// (XINFO STREAM and XINFO GROUPS: one pipelined round trip) and, with
// detail, the groups' consumers and the lag Redis cannot tell (XINFO
// CONSUMERS, XRANGE of at most lagCount+1 entries: one more). Its errors
// say what it was reading.
func (s *Store) ReadStreamInfo(ctx context.Context, detail bool, lagCount int64) ([]StreamInfo, error) {
	pipe := s.rdb.Pipeline()
	groups := make([]*redis.XInfoGroupsCmd, len(s.shards))
	evInfo := make([]*redis.XInfoStreamCmd, len(s.shards))
	deadInfo := make([]*redis.XInfoStreamCmd, len(s.shards))
	for i, sk := range s.shards {
		groups[i] = pipe.XInfoGroups(ctx, sk.Events)
		evInfo[i] = pipe.XInfoStream(ctx, sk.Events)
		deadInfo[i] = pipe.XInfoStream(ctx, sk.Dead)
	}
	_, _ = pipe.Exec(ctx) // a missing stream fails its XINFO: read per command
	type pending struct {
		g    *GroupDetail
		cmds *redis.XInfoConsumersCmd
		lag  *redis.XMessageSliceCmd // where Redis cannot tell the lag
	}
	var more []pending
	out := make([]StreamInfo, len(s.shards))
	pipe = s.rdb.Pipeline()
	for i, sk := range s.shards {
		for _, c := range []*redis.XInfoStreamCmd{evInfo[i], deadInfo[i]} {
			if err := c.Err(); err != nil && !noKey(err) {
				return nil, fmt.Errorf("read %s: %w", c.Args()[2], err)
			}
		}
		out[i].Events, out[i].Dead = evInfo[i].Val(), deadInfo[i].Val()
		if err := groups[i].Err(); err != nil {
			if noKey(err) {
				continue
			}
			return nil, fmt.Errorf("read %s: %w", sk.Events, err)
		}
		out[i].Groups = make([]GroupDetail, len(groups[i].Val()))
		for j, x := range groups[i].Val() {
			g := &out[i].Groups[j]
			g.XInfoGroup = x
			if !detail {
				continue
			}
			p := pending{g: g, cmds: pipe.XInfoConsumers(ctx, sk.Events, x.Name)}
			if x.Lag >= 0 {
				g.Lag = x.Lag
			} else {
				// Entries were deleted (every group had them): Redis does
				// not count what is left after last-delivered-id; count it,
				// up to lagCount.
				p.lag = pipe.XRangeN(ctx, sk.Events, "("+x.LastDeliveredID, "+", lagCount+1)
			}
			more = append(more, p)
		}
	}
	if len(more) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for _, p := range more {
		if p.lag != nil {
			p.g.Lag = min(int64(len(p.lag.Val())), lagCount)
			p.g.LagMore = int64(len(p.lag.Val())) > lagCount
		}
		if err := p.cmds.Err(); err != nil {
			if noKey(err) || redis.HasErrorPrefix(err, "NOGROUP") {
				continue // deleted in between
			}
			return nil, fmt.Errorf("read the consumers of %s: %w", p.g.Name, err)
		}
		p.g.Consumers = p.cmds.Val()
	}
	return out, nil
}

// noKey reports whether err is Redis saying a stream is not there (XINFO
// of a missing key).
func noKey(err error) bool {
	return redis.HasErrorPrefix(err, "no such key")
}
