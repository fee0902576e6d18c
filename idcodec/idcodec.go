// Package idcodec maps snowflake IDs (Twitter, Sonyflake, Discord,
// Instagram and layouts of your own) to sorted-set scores that a double
// holds exactly, and to fixed-width members, so that a Redis sorted set
// scored by ID lists its IDs in ID order. Its errors match
// expset.ErrInvalidArgument.
package idcodec

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// Layout describes how a snowflake generator packs an ID into the 63 bits
// after the sign bit: the time field on top, then the node and sequence
// fields in the order the generator uses (see SeqHigh).
//
// The time field counts TimeUnit since Epoch. TimeBits+NodeBits+SeqBits must
// be 63, and 2^TimeBits time units must fit in a time.Duration (292 years).
// Generators with 64-bit IDs whose top bit is part of the time field (Discord,
// Instagram) are described by their 63 low bits: the IDs stay positive int64
// until that bit is first set, which is then their horizon.
type Layout struct {
	// Name names the layout in errors; it may be empty.
	Name string

	// Epoch is time zero of the generator.
	Epoch time.Time

	// TimeUnit is the length of one tick of the time field: 1ms for Twitter,
	// 10ms for Sonyflake.
	TimeUnit time.Duration

	// TimeBits, NodeBits and SeqBits are the widths of the time, node
	// (worker, machine, shard) and sequence fields.
	TimeBits, NodeBits, SeqBits int

	// SeqHigh says the sequence field sits above the node field, as in
	// Sonyflake v1 and v2 (time|sequence|machine). False, the zero value, is
	// Twitter's order: time|node|sequence.
	SeqHigh bool
}

// The layouts of common generators.
var (
	// Twitter is the layout of Twitter's snowflake and of
	// github.com/bwmarrin/snowflake with its defaults: 41 bits of
	// milliseconds since 2010-11-04T01:42:54.657Z, 10 bits of node and
	// 12 bits of sequence. Its time field runs out in 2080.
	Twitter = Layout{Name: "Twitter", Epoch: time.UnixMilli(1288834974657).UTC(),
		TimeUnit: time.Millisecond, TimeBits: 41, NodeBits: 10, SeqBits: 12}

	// Sonyflake is the layout of github.com/sony/sonyflake v1 with its
	// default start time: 39 bits of 10 ms units since 2014-09-01 UTC, then
	// 8 bits of sequence above 16 bits of machine ID. Its time field runs
	// out in 2188. Sonyflake v2 starts elsewhere by default: see SonyflakeV2.
	Sonyflake = Layout{Name: "Sonyflake", Epoch: time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC),
		TimeUnit: 10 * time.Millisecond, TimeBits: 39, NodeBits: 16, SeqBits: 8, SeqHigh: true}

	// SonyflakeV2 is the layout of github.com/sony/sonyflake/v2 with its
	// default settings: the bits of Sonyflake (39 of 10 ms units, then 8 of
	// sequence above 16 of machine ID) counted from 2025-01-01 UTC, v2's
	// default start time. Its time field runs out in 2199. Read with the v1
	// layout, v2 IDs keep their order but their times (Time, ScoreAt,
	// Horizon) are 3775 days early. For IDs made with other v2 Settings,
	// copy it and set Epoch to StartTime, TimeUnit, SeqBits to BitsSequence,
	// NodeBits to BitsMachineID and TimeBits to 63 minus both.
	SonyflakeV2 = Layout{Name: "SonyflakeV2", Epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		TimeUnit: 10 * time.Millisecond, TimeBits: 39, NodeBits: 16, SeqBits: 8, SeqHigh: true}

	// Discord is the layout of Discord's snowflakes: milliseconds since
	// 2015-01-01 UTC, 5 bits of worker and 5 of process (one 10-bit node
	// field here) and 12 bits of increment. Discord reserves 42 time bits;
	// as positive int64 the IDs have 41, which run out in 2084.
	Discord = Layout{Name: "Discord", Epoch: time.UnixMilli(1420070400000).UTC(),
		TimeUnit: time.Millisecond, TimeBits: 41, NodeBits: 10, SeqBits: 12}

	// Instagram is the layout of Instagram's sharded IDs: milliseconds since
	// 2011-08-24T21:07:01.721Z, 13 bits of shard and 10 bits of sequence.
	// Instagram reserves 41 time bits; as positive int64 (a Postgres bigint)
	// the IDs have 40, which run out in 2046.
	Instagram = Layout{Name: "Instagram", Epoch: time.UnixMilli(1314220021721).UTC(),
		TimeUnit: time.Millisecond, TimeBits: 40, NodeBits: 13, SeqBits: 10}
)

func (l Layout) name() string {
	if l.Name != "" {
		return l.Name
	}
	return fmt.Sprintf("{time %d, node %d, seq %d}", l.TimeBits, l.NodeBits, l.SeqBits)
}

// seqShift is the position of the lowest bit of the sequence field.
func (l Layout) seqShift() int {
	if l.SeqHigh {
		return l.NodeBits
	}
	return 0
}

// scoreBits is the width of the integers a double holds exactly, less the
// sign: every score is below 2^scoreBits.
const scoreBits = 53

// memberLen is the width of a member: the digits of math.MaxInt64.
const memberLen = 19

// strategy says which bits of an ID a Codec keeps; the zero value is the
// default, keepTop.
type strategy uint8

const (
	keepTop strategy = iota
	keepTimeSeq
	keepTimeSeq52
)

var strategyNames = [...]string{"KeepTopBits", "KeepTimeSeq", "KeepTimeSeq52"}

func (s strategy) String() string {
	if int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("strategy(%d)", s)
}

// KeepTimeSeq keeps the time field and the whole sequence field, and drops
// the node field (53 bits for Twitter). Every ID one node makes gets a score
// of its own, but where the node field sits above the sequence (Twitter,
// Discord, Instagram), IDs of different nodes in the same tick sort by
// sequence, not by ID, and After follows that order. Where it sits below
// (Sonyflake), the dropped bits are the lowest and the order is exact, as
// with the default (KeepTopBits).
func KeepTimeSeq() Option {
	return option(func(c *Codec) error { c.strategy = keepTimeSeq; return nil })
}

// KeepTimeSeq52 is the published 52-bit scheme: the time field and as many
// low sequence bits as fit beside it in 52 bits, the node dropped (for
// Twitter: 41 time bits and the 11 low sequence bits, the top one dropped).
// It gives up what KeepTimeSeq gives up, and more: a node that makes more
// than 2^11 IDs in one millisecond wraps, so its later IDs reuse the scores
// of its first ones and sort among them. Use it only for scores already
// stored that way.
func KeepTimeSeq52() Option {
	return option(func(c *Codec) error { c.strategy = keepTimeSeq52; return nil })
}

// Option configures New: KeepTimeSeq, KeepTimeSeq52. Options apply in
// order, the later winning; a nil option does nothing. Its method is
// unexported: only this package makes options.
type Option interface{ apply(*Codec) error }

type option func(*Codec) error

func (f option) apply(c *Codec) error { return f(c) }

// Codec maps snowflake IDs to sorted-set scores that a double holds exactly,
// and to fixed-width members, so that a sorted set scored by ID lists its IDs
// in ID order and its ranges by score are exact.
//
// A score is an IEEE double: every integer up to 2^53 is exact and nothing
// above it is. A 63-bit snowflake ID used as a score as it is gets rounded to
// a multiple of up to 1024, so neighbours such as 215857550229364736 and
// 215857550229364737 become one score and ZRANGEBYSCORE returns the wrong
// members. A Codec keeps 53 bits of the ID in the score (an integer below
// 2^53) and the whole ID in the member:
//
//	ZADD key <Score(id)> <Member(id)>
//
// Redis sorts members of equal score by their bytes, and Member writes the ID
// in 19 zero-padded digits, so equal scores sort by ID: with the default
// strategy, ZRANGE lists the IDs in exactly ID order. After reads the IDs
// after a cursor ID, and ScoreAt gives the score bound of a time range.
//
// Which bits are kept (bit 63 is the sign bit, always 0; KeepTopBits is the
// default strategy, which takes no option):
//
//	Twitter, bwmarrin, Discord:  63 62          22 21       12 11        0
//	                            +--+--------------+-----------+-----------+
//	                            |0 | time 41 x1ms |  node 10  |  seq 12   |
//	                            +--+--------------+-----------+-----------+
//	KeepTopBits (default)           [-----------------------------]         53 bits
//	KeepTimeSeq                     [-------------]            [----------] 53 bits
//	KeepTimeSeq52                   [-------------]             [---------] 52 bits
//
//	Sonyflake v1 and v2:         63 62          24 23      16 15         0
//	                            +--+--------------+----------+------------+
//	                            |0 | time 39 x10ms|  seq 8   | machine 16 |
//	                            +--+--------------+----------+------------+
//	KeepTopBits (default)           [------------------------------]        53 bits
//	KeepTimeSeq, KeepTimeSeq52      [-------------------------]             47 bits
//
//	Instagram:                   63 62          23 22       10 9         0
//	                            +--+--------------+-----------+-----------+
//	                            |0 | time 40 x1ms |  shard 13 |  seq 10   |
//	                            +--+--------------+-----------+-----------+
//	KeepTopBits (default)           [--------------------------]            53 bits
//	KeepTimeSeq, KeepTimeSeq52      [-------------]             [---------] 50 bits
//
// The budget per layout and strategy: the bits kept, the year the time field
// outgrows them (the horizon: past it Score fails with expset.ErrInvalidArgument; for
// these layouts it is the generator's own), how many IDs can share one
// score, and what order ZRANGE keeps:
//
//	layout       strategy       bits kept                              horizon  IDs per score  ZRANGE order
//	Twitter      KeepTopBits    53 = time 41 + node 10 + seq 2 (high)  2080     1024           ID order
//	Twitter      KeepTimeSeq    53 = time 41 + seq 12                  2080     1024           time, then sequence
//	Twitter      KeepTimeSeq52  52 = time 41 + seq 11 (low)            2080     2048           time, then sequence mod 2048
//	Sonyflake    KeepTopBits    53 = time 39 + seq 8 + node 6 (high)   2188     1024           ID order
//	Sonyflake    KeepTimeSeq    47 = time 39 + seq 8                   2188     65536          ID order
//	Sonyflake    KeepTimeSeq52  47 = time 39 + seq 8                   2188     65536          ID order
//	SonyflakeV2  KeepTopBits    53 = time 39 + seq 8 + node 6 (high)   2199     1024           ID order
//	SonyflakeV2  KeepTimeSeq    47 = time 39 + seq 8                   2199     65536          ID order
//	SonyflakeV2  KeepTimeSeq52  47 = time 39 + seq 8                   2199     65536          ID order
//	Discord      KeepTopBits    53 = time 41 + node 10 + seq 2 (high)  2084     1024           ID order
//	Discord      KeepTimeSeq    53 = time 41 + seq 12                  2084     1024           time, then sequence
//	Discord      KeepTimeSeq52  52 = time 41 + seq 11 (low)            2084     2048           time, then sequence mod 2048
//	Instagram    KeepTopBits    53 = time 40 + node 13                 2046     1024           ID order
//	Instagram    KeepTimeSeq    50 = time 40 + seq 10                  2046     8192           time, then sequence
//	Instagram    KeepTimeSeq52  50 = time 40 + seq 10                  2046     8192           time, then sequence
//
// The IDs that share a score differ only in the bits dropped. With
// KeepTopBits those are the 10 lowest: for Twitter, a block of 1024
// sequence numbers of one node in one millisecond; for Sonyflake, 1024
// machines with the same sequence number in one 10 ms tick. With the other
// strategies they are the IDs of different nodes in one tick (and for
// KeepTimeSeq52, sequence numbers 2048 apart). Equal scores cost nothing in
// order, since members break the tie, but a ZRANGE BYSCORE from an ID's
// score also returns the IDs before it that share the score: After skips
// them.
//
// The order is exact (a < b implies Score(a) <= Score(b), and ZRANGE lists
// IDs in ID order) with the default strategy, and with KeepTimeSeq or
// KeepTimeSeq52 where the node field is the lowest field of the ID (SeqHigh
// layouts such as Sonyflake) or has no bits.
//
// A Codec is immutable and safe for simultaneous use by multiple goroutines.
// The zero Codec is not usable: build one with New.
type Codec struct {
	layout   Layout
	strategy strategy

	// score(u) = (u >> hiShift) << loBits | (u >> loShift) & loMask
	hiShift, loShift, loBits uint
	loMask                   uint64
	hiLimit                  uint64 // hi parts from here on are past the horizon; 0 in the zero Codec

	timeShift uint   // u >> timeShift is the time field
	timeLimit uint64 // the first time field past the horizon
}

// New returns a Codec for IDs of layout l. By default (KeepTopBits in
// the tables of Codec) it keeps the 53 most significant bits of the ID: the
// whole time field and then node and sequence bits, top down, until 53 bits
// are used. Scores never decrease as IDs grow, so with Member as the member a
// sorted set lists IDs in exactly ID order. IDs that differ only in their 10
// low bits share a score: for Twitter, up to 1024 IDs one node makes in one
// millisecond. (In a custom layout whose node and sequence fields have fewer
// than 10 bits together, it drops time bits too, and neighbouring ticks share
// scores.) It is what new data should use; KeepTimeSeq and KeepTimeSeq52
// choose other bits. It fails with expset.ErrInvalidArgument when TimeBits is
// under 1, NodeBits or SeqBits is negative, the three do not add up to 63,
// TimeUnit is not positive, 2^TimeBits time units overflow a time.Duration,
// Epoch is the zero time, or KeepTimeSeq leaves the time field no room.
func New(l Layout, opts ...Option) (*Codec, error) {
	c := &Codec{layout: l}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	switch {
	case l.TimeBits < 1 || l.NodeBits < 0 || l.SeqBits < 0:
		return nil, fmt.Errorf("%w: snowflake layout %s: field widths time %d, node %d, seq %d (time needs 1 bit, the others 0 or more)", expset.ErrInvalidArgument, l.name(), l.TimeBits, l.NodeBits, l.SeqBits)
	case l.TimeBits+l.NodeBits+l.SeqBits != 63:
		return nil, fmt.Errorf("%w: snowflake layout %s: field widths add up to %d bits, want 63", expset.ErrInvalidArgument, l.name(), l.TimeBits+l.NodeBits+l.SeqBits)
	case l.TimeUnit <= 0:
		return nil, fmt.Errorf("%w: snowflake layout %s: time unit %v is not positive", expset.ErrInvalidArgument, l.name(), l.TimeUnit)
	case uint64(1)<<l.TimeBits > uint64(math.MaxInt64/l.TimeUnit):
		return nil, fmt.Errorf("%w: snowflake layout %s: 2^%d time units of %v overflow a time.Duration", expset.ErrInvalidArgument, l.name(), l.TimeBits, l.TimeUnit)
	case l.Epoch.IsZero():
		return nil, fmt.Errorf("%w: snowflake layout %s: zero epoch", expset.ErrInvalidArgument, l.name())
	}

	c.timeShift = uint(l.NodeBits + l.SeqBits)
	c.timeLimit = 1 << l.TimeBits
	budget, lo := scoreBits, 0 // lo: sequence bits kept below the time field
	switch c.strategy {
	case keepTop:
		lo = -1
	case keepTimeSeq:
		lo = l.SeqBits
	case keepTimeSeq52:
		budget = scoreBits - 1
		lo = max(0, min(l.SeqBits, budget-l.TimeBits))
	default:
		return nil, fmt.Errorf("%w: snowflake layout %s: unknown strategy %d", expset.ErrInvalidArgument, l.name(), c.strategy)
	}
	if lo >= budget {
		return nil, fmt.Errorf("%w: snowflake layout %s: %v keeps %d sequence bits, leaving no room for the time in %d", expset.ErrInvalidArgument, l.name(), c.strategy, lo, budget)
	}
	if lo < 0 || (l.NodeBits == 0 || l.SeqHigh) && lo == l.SeqBits {
		// The dropped bits are the lowest: one shift keeps the rest, in order.
		keep := budget
		if lo >= 0 {
			keep = l.TimeBits + lo
		}
		c.hiShift = uint(63 - keep)
	} else {
		c.hiShift = c.timeShift
		c.loShift = uint(l.seqShift())
		c.loBits = uint(lo)
		c.loMask = 1<<lo - 1
		budget -= lo
	}
	// Capped at the range of non-negative IDs, one comparison rejects both
	// negative IDs and those past the horizon.
	c.hiLimit = 1 << min(budget, 63-int(c.hiShift))
	// hi < 2^budget holds for every time field below 2^e.
	if e := budget + int(c.hiShift) - int(c.timeShift); e < l.TimeBits {
		c.timeLimit = 1 << e
	}
	return c, nil
}

// ordered reports whether a < b implies Score(a) <= Score(b) for all IDs, so
// that a sorted set with Member as the member lists IDs in exactly ID order:
// with the default strategy, and with the others where the dropped node bits
// are the lowest bits of the ID (see Codec).
func (c *Codec) ordered() bool { return c.loBits == 0 }

// Horizon returns the start of the first tick whose IDs c cannot score: the
// end of the generator's time field, or earlier when the strategy keeps fewer
// time bits than the layout has.
func (c *Codec) Horizon() time.Time {
	return c.layout.Epoch.Add(time.Duration(c.timeLimit) * c.layout.TimeUnit)
}

// score is the score of u without checks: for u past the horizon, a value
// up to 2^53.
func (c *Codec) score(u uint64) uint64 {
	return (u>>c.hiShift)<<c.loBits | (u>>c.loShift)&c.loMask
}

// Score returns the score of id: an integer below 2^53, which a double holds
// exactly, so Redis stores, returns and compares it without rounding. With an
// Ordered Codec (the default) a < b implies Score(a) <= Score(b); otherwise
// scores still grow with the time field. It fails with expset.ErrInvalidArgument when id is
// negative or its time lies past the Horizon.
func (c *Codec) Score(id int64) (float64, error) {
	u := uint64(id)
	hi := u >> (c.hiShift & 63) // &63: shifts are below 64, no check needed
	if hi >= c.hiLimit {
		return 0, &idError{c, id} // formatted when read, so Score inlines
	}
	return float64(int64(hi<<(c.loBits&63) | u>>(c.loShift&63)&c.loMask)), nil // below 2^53: exact
}

// idError is the error of Score for an ID past the horizon, a negative ID or
// the zero Codec: expset.ErrInvalidArgument, with the ID at fault.
type idError struct {
	c  *Codec
	id int64
}

func (e *idError) Unwrap() error { return expset.ErrInvalidArgument }

func (e *idError) Error() string {
	c, id := e.c, e.id
	switch {
	case c.hiLimit == 0:
		return expset.ErrInvalidArgument.Error() + ": zero Codec: build it with New"
	case id < 0:
		return fmt.Sprintf("%v: snowflake id %d is negative", expset.ErrInvalidArgument, id)
	}
	return fmt.Sprintf("%v: snowflake id %d: its time %s is past the codec's horizon %s",
		expset.ErrInvalidArgument, id, c.Time(id).Format(time.RFC3339Nano), c.Horizon().Format(time.RFC3339Nano))
}

// ScoreAt returns the lowest score of any ID generated at t or later: the
// score of the first ID of t's tick. Every ID with a lower score was generated
// before t's tick began, so
//
//	ZREMRANGEBYSCORE key -inf (<ScoreAt(t)>
//
// removes every ID older than t (to the tick), and ZRANGE BYSCORE from
// ScoreAt(t) to (ScoreAt(u) reads those of [t, u). Before the Epoch it
// returns 0; past the Horizon it returns one more than the highest score,
// at most 2^53, which is still exact.
func (c *Codec) ScoreAt(t time.Time) float64 {
	if c.layout.TimeUnit <= 0 {
		return 0
	}
	d := t.Sub(c.layout.Epoch)
	if d <= 0 {
		return 0
	}
	tick := min(uint64(d/c.layout.TimeUnit), c.timeLimit)
	return float64(int64(c.score(tick << c.timeShift)))
}

// Time returns the time id was generated at: the start of its tick. It reads
// the time field whether or not Score can keep it; for a negative id it
// returns the zero time.
func (c *Codec) Time(id int64) time.Time {
	if id < 0 {
		return time.Time{}
	}
	return c.layout.Epoch.Add(time.Duration(uint64(id)>>c.timeShift) * c.layout.TimeUnit)
}

// Member returns id as a sorted-set member: 19 decimal digits, zero-padded
// ("0215857550229364736"), so that members sort like the IDs they hold. It is
// the only call of a Codec that allocates. For a negative id, which Score
// rejects, it returns "".
func (c *Codec) Member(id int64) string {
	if id < 0 {
		return ""
	}
	// Two halves, written side by side: shorter chains of divisions.
	var b [memberLen]byte
	hi, lo := uint64(id)/1e9, uint64(id)%1e9
	for i := memberLen - 1; i >= 10; i-- {
		b[i], b[i-9] = byte('0'+lo%10), byte('0'+hi%10)
		lo, hi = lo/10, hi/10
	}
	b[0] = byte('0' + hi)
	return string(b[:])
}

// ParseMember returns the ID of a member written by Member. It fails with
// expset.ErrInvalidArgument unless s is exactly 19 decimal digits of a value up to
// math.MaxInt64.
func (c *Codec) ParseMember(s string) (int64, error) {
	if len(s) != memberLen {
		return 0, memberError(s)
	}
	// Digits 0-9 and 10-18 in two chains side by side; 19 digits stay
	// below 2^64.
	hi, lo := uint64(s[0]-'0'), uint64(0)
	if hi > 9 {
		return 0, memberError(s)
	}
	for i := 1; i < 10; i++ {
		a, b := s[i]-'0', s[i+9]-'0'
		if a > 9 || b > 9 {
			return 0, memberError(s)
		}
		hi, lo = hi*10+uint64(a), lo*10+uint64(b)
	}
	u := hi*1e9 + lo
	if u > math.MaxInt64 {
		return 0, memberError(s)
	}
	return int64(u), nil
}

func memberError(s string) error {
	if len(s) > 2*memberLen {
		s = s[:2*memberLen] + "..."
	}
	return fmt.Errorf("%w: snowflake member %q (want %d decimal digits, at most %d, as Codec.Member writes)", expset.ErrInvalidArgument, s, memberLen, int64(math.MaxInt64))
}

// formatScore writes a score as the exact decimal Redis parses back to the
// same double.
func formatScore(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }

// maxAfterCount is the largest count Codec.After accepts: a page of at most
// about a million IDs (8 MiB of them). Read more with several calls.
const maxAfterCount = 1 << 20

// After returns up to count IDs that follow id in the sorted set at key, in
// the set's order: ID order when c is Ordered. It is the cursor of a
// paginated read: pass the last ID of one page to get the next; a negative id
// starts at the beginning. id need not be in the set.
//
// The set must have been written with c: scores from Score, members from
// Member. After reads with ZRANGE key <Score(id)> +inf BYSCORE LIMIT, skipping
// the IDs up to id that share its score; it takes one round trip unless more
// than count of those precede the first ID after id, and then doubles its
// reads. A count under 1 returns nil. It fails with expset.ErrInvalidArgument when
// count is above 2^20, when id is past the Horizon, or when a member was
// not written by Member,
// and with the error of Redis. What it allocates grows with the IDs Redis
// returns, not with count.
func (c *Codec) After(ctx context.Context, rdb redis.SortedSetCmdable, key string, id int64, count int64) ([]int64, error) {
	if count < 1 {
		return nil, nil
	}
	if count > maxAfterCount {
		return nil, fmt.Errorf("%w: After(%d, count %d): want at most maxAfterCount (%d); read further pages with the last ID returned", expset.ErrInvalidArgument, id, count, maxAfterCount)
	}
	from, skipScore := "-inf", -1.0
	if id >= 0 {
		s, err := c.Score(id)
		if err != nil {
			return nil, err
		}
		from, skipScore = formatScore(s), s
	}
	var out []int64
	offset, n := int64(0), count+1 // +1: id itself is usually in the set
	for {
		zs, err := rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: key, Start: from, Stop: "+inf", ByScore: true, Offset: offset, Count: n,
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("expset: ids after %d in %q: %w", id, key, err)
		}
		for _, z := range zs {
			m, _ := z.Member.(string)
			v, err := c.ParseMember(m)
			if err != nil {
				return nil, fmt.Errorf("%w in %q", err, key)
			}
			if z.Score == skipScore && v <= id {
				continue
			}
			if out == nil {
				out = make([]int64, 0, min(count, int64(len(zs))))
			}
			out = append(out, v)
			if int64(len(out)) == count {
				return out, nil
			}
		}
		if int64(len(zs)) < n {
			return out, nil
		}
		offset += int64(len(zs))
		if len(out) > 0 {
			n = count - int64(len(out)) // past id: nothing left to skip
		} else {
			n *= 2
		}
	}
}
