package main

import (
	"fmt"
	"strconv"
	"time"
)

// stalledWarning is the warning expset stats prints below its table, and
// expset web shows on a set's page, when t counts stalled shards (of
// shards): work due there and no sweeper alive, so nothing of it is
// delivered. It says how much is due, how long the oldest has waited and
// what to start: "no sweeper running: 5 due (members and jobs) on 3 of 8
// shards, the oldest 1m30.013s overdue; nothing of them is delivered
// until ...". A shard can be stalled with nothing counted due (an owner
// due whose members were removed): then it says "work due".
func stalledWarning(t totalRow, shards int) string {
	due := "work due"
	if t.StalledDue > 0 {
		n := strconv.FormatInt(t.StalledDue, 10)
		if t.StalledPartial {
			n += "+"
		}
		due = n + " due (members and jobs)"
	}
	late := ""
	if t.StalledLagMS > 0 {
		late = fmt.Sprintf(", the oldest %v overdue", time.Duration(t.StalledLagMS)*time.Millisecond)
	}
	return fmt.Sprintf("no sweeper running: %s on %d of %d shards%s; nothing of them is delivered until a Sweeper.Run (expset sweep), or a Consume or Reserve without WithoutSweeper, starts",
		due, t.Stalled, shards, late)
}
