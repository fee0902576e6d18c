package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// CommandStats reports how often cmd (e.g. "evalsha", or "client|list" for a
// subcommand) has run according to INFO commandstats, and its mean
// server-side time in microseconds (usec/calls, unrounded). For a
// ClusterClient it sums over all masters. A command that never ran gives 0, 0.
func CommandStats(ctx context.Context, c redis.UniversalClient, cmd string) (calls int64, usecPerCall float64, err error) {
	var mu sync.Mutex
	var usec float64
	add := func(ctx context.Context, node redis.UniversalClient) error {
		info, err := Info(ctx, node, "commandstats")
		if err != nil {
			return err
		}
		line, ok := info["cmdstat_"+strings.ToLower(cmd)]
		if !ok {
			return nil
		}
		n, u, err := parseCommandStat(line)
		if err != nil {
			return err
		}
		mu.Lock()
		calls, usec = calls+n, usec+u
		mu.Unlock()
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return add(ctx, node) })
	} else {
		err = add(ctx, c)
	}
	if err != nil {
		return 0, 0, err
	}
	if calls > 0 {
		usecPerCall = usec / float64(calls)
	}
	return calls, usecPerCall, nil
}

// parseCommandStat parses the value of a commandstats line, such as
// "calls=10,usec=25,usec_per_call=2.50,rejected_calls=0,failed_calls=0".
func parseCommandStat(s string) (calls int64, usec float64, err error) {
	var haveCalls, haveUsec bool
	for _, field := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(field, "=")
		switch k {
		case "calls":
			calls, err = strconv.ParseInt(v, 10, 64)
			haveCalls = err == nil
		case "usec":
			usec, err = strconv.ParseFloat(v, 64)
			haveUsec = err == nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("commandstats %q: %s: %w", s, k, err)
		}
	}
	if !haveCalls || !haveUsec {
		return 0, 0, fmt.Errorf("commandstats %q: no calls or usec", s)
	}
	return calls, usec, nil
}
