package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/expset/expset"
)

// shardGauges are the gauges "expset stats --serve" exposes, one sample per
// shard, written by hand in the Prometheus text exposition format (version
// 0.0.4): this command is in the core module, which does not depend on the
// Prometheus client. Their names do not collide with those of the hook-based
// collector in github.com/expset/expset/prometheus, so both can feed one
// Prometheus.
var shardGauges = []struct {
	name, help string
	value      func(expset.ShardStats) float64
}{
	{"expset_shard_owners", "Owners in the shard's due index: every owner holding members, plus stale entries.",
		func(s expset.ShardStats) float64 { return float64(s.Owners) }},
	{"expset_shard_owners_due", "Owners with a member past its deadline: the ones the next sweep visits.",
		func(s expset.ShardStats) float64 { return float64(s.OwnersDue) }},
	{"expset_shard_members_due", "Expired members no sweeper has removed yet (counted over the first 1000 due owners).",
		func(s expset.ShardStats) float64 { return float64(s.MembersDue) }},
	{"expset_shard_lag_seconds", "How long ago the oldest unswept deadline passed: how far behind the sweeper is (0 when nothing is due).",
		func(s expset.ShardStats) float64 {
			if s.OldestDue.IsZero() {
				return 0
			}
			return max(s.Now.Sub(s.OldestDue).Seconds(), 0)
		}},
	{"expset_shard_events", "Expiry events in the shard's stream: waiting for a consumer, or delivered and not yet acknowledged.",
		func(s expset.ShardStats) float64 { return float64(s.Events) }},
	{"expset_shard_pending", "Expiry events delivered to a consumer and not yet acknowledged.",
		func(s expset.ShardStats) float64 { return float64(s.Pending) }},
	{"expset_shard_dead_letters", "Expiry events that failed every attempt and wait in the dead-letter stream.",
		func(s expset.ShardStats) float64 { return float64(s.Dead) }},
	{"expset_shard_events_trimmed", "Expiry events the stream retention removed before every consumer group had them, since the shard began.",
		func(s expset.ShardStats) float64 { return float64(s.Trimmed) }},
	{"expset_shard_lease_held", "1 when a sweeper holds the shard's lease, else 0.",
		func(s expset.ShardStats) float64 {
			if s.Leased {
				return 1
			}
			return 0
		}},
}

// writeMetrics writes the shard gauges of set name.
func writeMetrics(w io.Writer, name string, st []expset.ShardStats) {
	bw := bufio.NewWriter(w)
	set := labelValue(name)
	for _, g := range shardGauges {
		bw.WriteString("# HELP " + g.name + " " + g.help + "\n# TYPE " + g.name + " gauge\n")
		for _, s := range st {
			bw.WriteString(g.name + `{set="` + set + `",shard="` + strconv.Itoa(s.Shard) + `"} ` +
				strconv.FormatFloat(g.value(s), 'g', -1, 64) + "\n")
		}
	}
	bw.Flush()
}

// labelValue escapes a label value as the exposition format wants (set
// names cannot hold these characters today; a later rule might let them).
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
