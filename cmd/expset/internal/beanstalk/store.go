package beanstalk

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// script is one Lua script: tube.lua (for a script on a tube's keys), then
// the script's own file, joined unchanged.
func script(name string, onTube bool) *redis.Script {
	own, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded: a missing file is a build mistake
	}
	if !onTube {
		return redis.NewScript(string(own))
	}
	shared, err := luaFS.ReadFile("lua/tube.lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(shared) + "\n" + string(own))
}

var (
	scriptNewID      = script("newid", false)
	scriptPut        = script("put", true)
	scriptPutOne     = script("put_one", true)
	scriptReserve    = script("reserve", true)
	scriptHead       = script("head", true)
	scriptReserveJob = script("reserve_job", true)
	scriptDelete     = script("delete", true)
	scriptRelease    = script("release", true)
	scriptBury       = script("bury", true)
	scriptTouch      = script("touch", true)
	scriptKick       = script("kick", true)
	scriptKickJob    = script("kick_job", true)
	scriptPeek       = script("peek", true)
	scriptStatsJob   = script("stats_job", true)
	scriptStatsTube  = script("stats_tube", true)
	scriptPause      = script("pause", true)
)

// errReply marks a script reply of an unexpected shape.
var errReply = errors.New("beanstalk: unexpected reply from Redis")

// Store is the queue's state in Redis: every tube, job and counter the
// protocol shows, under one key prefix. Any number of Stores (in any number
// of processes) on one Redis or Cluster with one prefix serve one queue. A
// Store is safe for simultaneous use by multiple goroutines.
//
// Keys (P is the prefix; every key of one tube shares the tube's hash tag, the
// ID counter and the job -> tube map share another):
//
//	P:{ids}:seq           string  the last job ID (INCR)
//	P:{ids}:jobs          hash    job ID -> tube name
//	P:{ids}:tubes         set     names of the tubes jobs were ever put in
//	P:{t:NAME}:ready      zset    and :delayed :reserved :buried :meta :body
//	                              :owner :stat (see lua/tube.lua)
type Store struct {
	rdb     redis.UniversalClient
	prefix  string
	channel string // pub/sub channel of wake-ups; a message is a tube's name
}

// NewStore returns a Store on rdb with keys under prefix (no braces).
func NewStore(rdb redis.UniversalClient, prefix string) (*Store, error) {
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("beanstalk: key prefix %q: want a non-empty prefix without braces", prefix)
	}
	return &Store{rdb: rdb, prefix: prefix, channel: prefix + ":wake"}, nil
}

// Channel returns the pub/sub channel where every change that may let a
// waiting reserve proceed is published, with the tube's name.
func (s *Store) Channel() string { return s.channel }

func (s *Store) idKeys() []string {
	p := s.prefix + ":{ids}:"
	return []string{p + "seq", p + "jobs", p + "tubes"}
}

func (s *Store) tubeKeys(tube string) []string {
	p := s.prefix + ":{t:" + tube + "}:"
	return []string{p + "ready", p + "delayed", p + "reserved", p + "buried", p + "meta", p + "body", p + "owner", p + "stat"}
}

// pad is a job ID as the tube's keys hold it: 20 digits, so that members of
// one score sort by ID.
func pad(id uint64) string { return fmt.Sprintf("%020d", id) }

func unpad(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: job ID %q", errReply, s)
	}
	return id, nil
}

// Put stores a new job in tube and returns its ID. delay and ttr are in
// seconds; ttr is at least 1. On one Redis server (a *redis.Client) it is one
// script; otherwise two (the ID on the counter's slot, then the job on the
// tube's), as a cluster needs.
func (s *Store) Put(ctx context.Context, tube string, pri uint32, delay, ttr uint32, body []byte) (uint64, error) {
	if _, one := s.rdb.(*redis.Client); one {
		n, err := scriptPutOne.Run(ctx, s.rdb, append(s.tubeKeys(tube), s.idKeys()...), pri, delay, ttr, body, s.channel, tube).Int64()
		return uint64(n), err
	}
	n, err := scriptNewID.Run(ctx, s.rdb, s.idKeys(), tube).Int64()
	if err != nil {
		return 0, err
	}
	id := uint64(n)
	err = scriptPut.Run(ctx, s.rdb, s.tubeKeys(tube), pad(id), pri, delay, ttr, body, s.channel, tube).Err()
	if err != nil {
		return 0, err
	}
	return id, nil
}

// TubeOf returns the tube of job id, or "" when there is no such job.
func (s *Store) TubeOf(ctx context.Context, id uint64) (string, error) {
	tube, err := s.rdb.HGet(ctx, s.idKeys()[1], strconv.FormatUint(id, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return tube, err
}

// Forget removes jobs (deleted ones) from the job -> tube map.
func (s *Store) Forget(ctx context.Context, ids ...uint64) error {
	fields := make([]string, len(ids))
	for i, id := range ids {
		fields[i] = strconv.FormatUint(id, 10)
	}
	return s.rdb.HDel(ctx, s.idKeys()[1], fields...).Err()
}

// Job is a job as a reserve or a peek returns it.
type Job struct {
	ID   uint64
	TTR  uint32 // seconds; reserves only
	Body []byte
}

// Reserve reserves the most urgent ready job of tube for the connection
// token (or job want, when it is not 0, if that one is still ready). Without
// one it returns nil and how long until the tube next changes by itself
// (negative: never).
func (s *Store) Reserve(ctx context.Context, tube, token string, want uint64) (*Job, int64, error) {
	w := ""
	if want != 0 {
		w = pad(want)
	}
	v, err := scriptReserve.Run(ctx, s.rdb, s.tubeKeys(tube), token, w).Slice()
	if err != nil {
		return nil, 0, err
	}
	return reservedReply(v)
}

func reservedReply(v []any) (*Job, int64, error) {
	if len(v) == 2 {
		next, ok := v[1].(int64)
		if !ok {
			return nil, 0, errReply
		}
		return nil, next, nil
	}
	if len(v) != 4 {
		return nil, 0, errReply
	}
	ids, ok1 := v[1].(string)
	ttr, ok2 := v[2].(int64)
	body, ok3 := v[3].(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, 0, errReply
	}
	id, err := unpad(ids)
	if err != nil {
		return nil, 0, err
	}
	return &Job{ID: id, TTR: uint32(ttr), Body: []byte(body)}, 0, nil
}

// Head returns the ID and priority of the most urgent ready job of tube
// (ok false when it has none or is paused, with how long until it next
// changes by itself).
func (s *Store) Head(ctx context.Context, tube string) (id uint64, pri uint32, ok bool, next int64, err error) {
	v, err := scriptHead.Run(ctx, s.rdb, s.tubeKeys(tube)).Slice()
	if err != nil {
		return 0, 0, false, 0, err
	}
	if len(v) == 2 {
		n, ok := v[1].(int64)
		if !ok {
			return 0, 0, false, 0, errReply
		}
		return 0, 0, false, n, nil
	}
	ids, ok1 := v[1].(string)
	p, ok2 := v[2].(int64)
	if len(v) != 3 || !ok1 || !ok2 {
		return 0, 0, false, 0, errReply
	}
	id, err = unpad(ids)
	return id, uint32(p), err == nil, 0, err
}

// ReserveJob reserves job id of tube for token from ready, delayed or
// buried; nil when it is not there or already reserved.
func (s *Store) ReserveJob(ctx context.Context, tube string, id uint64, token string) (*Job, error) {
	v, err := scriptReserveJob.Run(ctx, s.rdb, s.tubeKeys(tube), pad(id), token).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j, _, err := reservedReply(v)
	return j, err
}

func (s *Store) flag(ctx context.Context, sc *redis.Script, tube string, args ...any) (bool, error) {
	n, err := sc.Run(ctx, s.rdb, s.tubeKeys(tube), args...).Int64()
	return n == 1, err
}

// Delete deletes job id of tube: ready, delayed, buried or reserved by token.
func (s *Store) Delete(ctx context.Context, tube string, id uint64, token string) (bool, error) {
	return s.flag(ctx, scriptDelete, tube, pad(id), token)
}

// Release puts job id, reserved by token, back in tube with priority pri,
// ready or after delay seconds. counted false is a connection closing: the
// job goes back ready as it was and no release is counted.
func (s *Store) Release(ctx context.Context, tube string, id uint64, token string, pri, delay uint32, counted bool) (bool, error) {
	c := "0"
	if counted {
		c = "1"
	}
	return s.flag(ctx, scriptRelease, tube, pad(id), token, pri, delay, c, s.channel, tube)
}

// Bury buries job id, reserved by token, with priority pri.
func (s *Store) Bury(ctx context.Context, tube string, id uint64, token string, pri uint32) (bool, error) {
	return s.flag(ctx, scriptBury, tube, pad(id), token, pri)
}

// Touch restarts the time to run of job id, reserved by token, and returns
// it (0: the job is not reserved by token).
func (s *Store) Touch(ctx context.Context, tube string, id uint64, token string) (uint32, error) {
	n, err := scriptTouch.Run(ctx, s.rdb, s.tubeKeys(tube), pad(id), token).Int64()
	return uint32(n), err
}

// Kick moves up to bound buried jobs of tube (or, when none is buried,
// delayed jobs) to ready and returns how many it moved.
func (s *Store) Kick(ctx context.Context, tube string, bound uint32) (uint32, error) {
	var done uint32
	mode := ""
	for done < bound {
		n := min(bound-done, 1000)
		v, err := scriptKick.Run(ctx, s.rdb, s.tubeKeys(tube), n, mode, s.channel, tube).Slice()
		if err != nil {
			return done, err
		}
		k, ok1 := v[0].(int64)
		m, ok2 := v[1].(string)
		if len(v) != 2 || !ok1 || !ok2 {
			return done, errReply
		}
		done += uint32(k)
		mode = m
		if uint32(k) < n {
			break
		}
	}
	return done, nil
}

// KickJob moves job id of tube from buried or delayed to ready.
func (s *Store) KickJob(ctx context.Context, tube string, id uint64) (bool, error) {
	return s.flag(ctx, scriptKickJob, tube, pad(id), s.channel, tube)
}

// Peek returns a job of tube without changing it: kind is "id" (job id),
// "ready", "delayed" or "buried". nil: no such job.
func (s *Store) Peek(ctx context.Context, tube, kind string, id uint64) (*Job, error) {
	v, err := scriptPeek.Run(ctx, s.rdb, s.tubeKeys(tube), kind, pad(id)).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids, ok1 := v[0].(string)
	body, ok2 := v[1].(string)
	if len(v) != 2 || !ok1 || !ok2 {
		return nil, errReply
	}
	jid, err := unpad(ids)
	if err != nil {
		return nil, err
	}
	return &Job{ID: jid, Body: []byte(body)}, nil
}

// JobStats is what stats-job shows of a job. Times are Redis's, in ms.
type JobStats struct {
	State                                       string
	Pri, TTR, Delay                             uint32
	Created                                     int64
	Reserves, Timeouts, Releases, Buries, Kicks int64
	Deadline, Now                               int64
}

// StatsJob returns job id of tube's stats; nil when there is no such job.
func (s *Store) StatsJob(ctx context.Context, tube string, id uint64) (*JobStats, error) {
	v, err := scriptStatsJob.Run(ctx, s.rdb, s.tubeKeys(tube), pad(id)).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(v) != 12 {
		return nil, errReply
	}
	state, ok := v[0].(string)
	n := make([]int64, 11)
	for i := range n {
		x, ok2 := v[i+1].(int64)
		ok = ok && ok2
		n[i] = x
	}
	if !ok {
		return nil, errReply
	}
	return &JobStats{State: state, Pri: uint32(n[0]), TTR: uint32(n[1]), Delay: uint32(n[2]), Created: n[3],
		Reserves: n[4], Timeouts: n[5], Releases: n[6], Buries: n[7], Kicks: n[8], Deadline: n[9], Now: n[10]}, nil
}

// TubeStats is what Redis holds of a tube's stats.
type TubeStats struct {
	Urgent, Ready, Reserved, Delayed, Buried int64
	Total, Deletes, Pauses                   int64
	Pause, PauseLeftMS                       int64
	Timeouts                                 int64
}

// Empty reports whether the tube holds no job.
func (t *TubeStats) Empty() bool { return t.Ready+t.Reserved+t.Delayed+t.Buried == 0 }

// StatsTube returns tube's counts.
func (s *Store) StatsTube(ctx context.Context, tube string) (*TubeStats, error) {
	v, err := scriptStatsTube.Run(ctx, s.rdb, s.tubeKeys(tube)).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != 11 {
		return nil, errReply
	}
	n := make([]int64, 11)
	for i := range n {
		x, ok := v[i].(int64)
		if !ok {
			return nil, errReply
		}
		n[i] = x
	}
	return &TubeStats{Urgent: n[0], Ready: n[1], Reserved: n[2], Delayed: n[3], Buried: n[4],
		Total: n[5], Deletes: n[6], Pauses: n[7], Pause: n[8], PauseLeftMS: n[9], Timeouts: n[10]}, nil
}

// Pause keeps every job of tube from being reserved for delay seconds (0
// ends a pause).
func (s *Store) Pause(ctx context.Context, tube string, delay uint32) error {
	return scriptPause.Run(ctx, s.rdb, s.tubeKeys(tube), delay, s.channel, tube).Err()
}

// Tubes returns the names of the tubes jobs were ever put in.
func (s *Store) Tubes(ctx context.Context) ([]string, error) {
	return s.rdb.SMembers(ctx, s.idKeys()[2]).Result()
}
