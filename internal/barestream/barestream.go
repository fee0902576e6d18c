// Package barestream is the floor the consumer benchmarks compare Set.Consume
// with: expiry events read, acknowledged and deleted with plain stream
// commands, no lease, attempt count or fan-out check.
package barestream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Consume reads, acknowledges and deletes n entries from streams as consumer
// "c1" of group (which must exist on each): one pipelined XREADGROUP (COUNT
// 100, not blocking) of every stream, then one pipeline of XACK and XDEL of
// what was read, until n are done. It fails when the streams run dry first.
func Consume(ctx context.Context, rdb redis.Cmdable, streams []string, group string, n int) error {
	for done := 0; done < n; {
		pipe := rdb.Pipeline()
		reads := make([]*redis.XStreamSliceCmd, len(streams))
		for i, st := range streams {
			reads[i] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c1", Streams: []string{st, ">"}, Count: 100, Block: -1})
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		ack := rdb.Pipeline()
		for i, r := range reads {
			res, err := r.Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return fmt.Errorf("xreadgroup %s: %w", streams[i], err)
			}
			for _, x := range res {
				ids := make([]string, len(x.Messages))
				for j, m := range x.Messages {
					ids[j] = m.ID
				}
				if len(ids) > 0 {
					ack.XAck(ctx, streams[i], group, ids...)
					ack.XDel(ctx, streams[i], ids...)
					done += len(ids)
				}
			}
		}
		if ack.Len() == 0 {
			return fmt.Errorf("streams empty after %d of %d events", done, n)
		}
		if _, err := ack.Exec(ctx); err != nil {
			return fmt.Errorf("xack: %w", err)
		}
	}
	return nil
}

// Streams returns the event streams of the shards of set name
// ("expset:{name:S}:ev"), with group created on each from the oldest entry.
func Streams(ctx context.Context, rdb redis.Cmdable, name string, shards int, group string) ([]string, error) {
	streams := make([]string, shards)
	for i := range streams {
		streams[i] = "expset:{" + name + ":" + strconv.Itoa(i) + "}:ev"
		if err := rdb.XGroupCreateMkStream(ctx, streams[i], group, "0").Err(); err != nil {
			return nil, fmt.Errorf("xgroup create %s: %w", streams[i], err)
		}
	}
	return streams, nil
}
