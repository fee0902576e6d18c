package expset

import (
	"context"
	"fmt"
	"strings"
)

// WithConsumerGroups declares the consumer groups that consume the set's
// expiry events (the set needs WithExpiryEvents; names of 1 to
// MaxConsumerLen bytes). Open creates each group on every shard's stream,
// starting at the oldest event retained, so that events are kept for a group
// from then on, even before its first Consume runs: an event leaves its
// stream only once every group on it has handled or dead-lettered it. A
// Consume that finds a shard's stream deleted makes it again with these
// groups and its own. Groups not declared are created by their first
// Consume, from the oldest event still retained then. Default: none.
func WithConsumerGroups(groups ...string) Option {
	return func(c *setConfig) {
		for _, g := range groups {
			if g == "" || len(g) > MaxConsumerLen {
				c.fail(fmt.Errorf("%w: WithConsumerGroups: group %q must be 1 to %d bytes", ErrInvalidConsumer, g, MaxConsumerLen))
				return
			}
		}
		c.groups = append(c.groups, groups...)
	}
}

// createGroups creates group and the set's declared groups on shard i's
// stream (and the stream, when missing), starting at its oldest entry; a
// group that exists is left as it is.
func (s *Set) createGroups(ctx context.Context, i int, group string) error {
	groups := s.groups
	if group != "" {
		groups = append([]string{group}, s.groups...)
	}
	key := s.shards[i].events
	for _, g := range groups {
		err := s.rdb.XGroupCreateMkStream(ctx, key, g, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("expset: create group %q on %s: %w", g, key, err)
		}
	}
	return nil
}

// declareGroups creates the declared groups on every shard's stream.
func (s *Set) declareGroups(ctx context.Context) error {
	if len(s.groups) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, sk := range s.shards {
		for _, g := range s.groups {
			pipe.XGroupCreateMkStream(ctx, sk.events, g, "0")
		}
	}
	cmds, _ := pipe.Exec(ctx)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("expset: open %q: create consumer group: %w", s.name, err)
		}
	}
	return nil
}
