package expset

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// Wake-ups of the background loops. The scripts publish on two channels of
// each shard, named after the key they follow (see internal/store/keys.go), with the
// shard's hash tag, so that on Redis Cluster the sharded channel lives on
// the shard's node and a script's SPUBLISH stays in its slot:
//
//   - expset:{name:S}:due:wake, the deadline (ms) of an owner that a write
//     made the head of the due index (the shard's next deadline moved
//     earlier): a Sweeper sleeps until its shards' next deadlines and is
//     woken by these;
//   - expset:{name:S}:ev:wake, when events were appended to the stream (a
//     sweep, an eviction, an expired member a write dropped, Kick): a
//     Consume sleeps until its shards' streams receive events; and "s" when
//     an owner slot was freed (WithOwnerConcurrency): a Consume holding
//     events of owners at their cap tries them again.
//
// The scripts SPUBLISH (PUBLISH where the server lacks it: miniredis), so a
// write pays for a wake-up only when it moves the next deadline earlier or
// appends events. A slow safety poll (WithPollInterval) covers a wake-up
// lost meanwhile, and every (re)subscription wakes the loop as if every
// shard had been notified, since one may have been lost while it was down.
// While a shard's subscription is up, a wake-up is lost only without a
// reconnect, so the loops look at the shard at every healthyStretch-th
// safety poll (looking).

// pubsubMode is which pub/sub the server speaks: sharded (SSUBSCRIBE,
// Redis 7.0+ and Valkey) or plain (SUBSCRIBE: miniredis), detected once per
// Set by publishing an empty message with SPUBLISH (which no receiver acts
// on).
const (
	pubsubUnknown int32 = iota
	pubsubSharded
	pubsubPlain
)

func (s *Set) pubsubPlain(ctx context.Context, ch string) (bool, error) {
	if m := s.pubsub.Load(); m != pubsubUnknown {
		return m == pubsubPlain, nil
	}
	err := s.rdb.Do(ctx, "SPUBLISH", ch, "").Err()
	switch {
	case err == nil:
		s.pubsub.Store(pubsubSharded)
	case redis.HasErrorPrefix(err, "unknown command"):
		s.pubsub.Store(pubsubPlain)
	default:
		return false, err
	}
	return s.pubsub.Load() == pubsubPlain, nil
}

// subscription is one pub/sub subscription to some of a Set's channels,
// read by one goroutine. go-redis re-subscribes after a reconnect or a
// failover; each (re)subscription confirmed calls resubscribed.
type subscription struct {
	ready  chan struct{} // closed once subscribed, or failed (err)
	err    error
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	ps     *redis.PubSub
	closed bool
	// up is whether every channel is subscribed: set when a subscription
	// is confirmed, cleared by an error of the connection (until the
	// re-subscription) and by an unsubscription the server sent.
	up atomic.Bool
}

// subscriber says what a subscription listens to and what it does.
type subscriber struct {
	op       string   // the op errors are reported as
	shard    int      // the shard errors are reported for (-1: several)
	channels []string // all on one node (one shard, or a single server)
	message  func(*redis.Message)
	// resubscribed is called when a subscription is confirmed after a
	// reconnect, and with retry also after the first one.
	resubscribed func()
	// retry makes a failed first subscription be tried again (reported,
	// with backoff) until close, instead of failing: ready is closed after
	// the first try either way.
	retry bool
	// quiet is how long the subscription may receive nothing before a
	// PING checks its connection (0: 3 * waitRenew).
	quiet time.Duration
}

// loopPing is how long a background loop's subscription stays quiet before
// a PING checks its connection: it costs a command per subscription, and
// the safety poll covers what a dead connection would lose meanwhile.
const loopPing = 30 * time.Second

// subscribe starts sub's subscription.
func (s *Set) subscribe(sub subscriber) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	p := &subscription{ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx, s, sub)
	return p
}

// isReady reports whether ready is closed (only run closes it).
func (p *subscription) isReady() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

// close ends the subscription and waits for its goroutine.
func (p *subscription) close() {
	p.mu.Lock()
	p.closed = true
	ps := p.ps
	p.mu.Unlock()
	p.cancel()
	if ps != nil {
		_ = ps.Close() // unblocks a pending read
	}
	<-p.done
}

func (p *subscription) run(ctx context.Context, s *Set, sub subscriber) {
	defer close(p.done)
	ps := p.subscribe(ctx, s, sub, sub.retry)
	if ps == nil {
		return
	}
	backoff := 10 * time.Millisecond
	quiet := sub.quiet
	if quiet <= 0 {
		quiet = 3 * waitRenew
	}
	for {
		msg, err := ps.ReceiveTimeout(ctx, quiet)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if netTimeout(err) {
				// Quiet for a while: a ping finds a dead connection, which
				// the next read replaces (re-subscribing).
				err = ps.Ping(ctx)
				if err == nil {
					continue
				}
			}
			p.up.Store(false)
			if errors.Is(err, redis.ErrClosed) {
				return // the client was closed: it never reconnects
			}
			if !errors.Is(err, net.ErrClosed) {
				// (A closed connection: the client's Close, as the next
				// read says, or its own doing, which the read mends.)
				s.reportError(ctx, sub.op, sub.shard, err, backoff)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, waitRenew)
			continue
		}
		backoff = 10 * time.Millisecond
		if ps = p.received(ctx, s, sub, ps, msg); ps == nil {
			return
		}
	}
}

// received acts on what the subscription received on ps: a message, or a
// (re)subscription, or an unsubscription the server sent, after which it
// subscribes again where the channels' slot is now. It returns what to
// read on next (nil: it gave up, ctx ended).
func (p *subscription) received(ctx context.Context, s *Set, sub subscriber, ps *redis.PubSub, msg any) *redis.PubSub {
	switch m := msg.(type) {
	case *redis.Message:
		sub.message(m)
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			p.up.Store(true)
			if sub.resubscribed != nil {
				sub.resubscribed()
			}
		case "sunsubscribe":
			// Only close unsubscribes; this came from the server: a
			// failover or a resharding moved the channels' slot to another
			// node, and Redis drops the subscribers of a slot it no longer
			// serves on a connection that stays up, which go-redis neither
			// reports nor mends. Subscribe again, where the slot is now.
			p.up.Store(false)
			_ = ps.Close()
			if cc, ok := s.rdb.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			return p.subscribe(ctx, s, sub, true)
		}
	}
	return ps
}

// subscribe opens the subscription (see open): once, or with retry again
// after each failure (reported, with backoff) until ctx ends. It closes
// ready after the first try, calls sub.resubscribed (with retry) once
// subscribed, before ready is closed, and returns nil when it gave up.
func (p *subscription) subscribe(ctx context.Context, s *Set, sub subscriber, retry bool) *redis.PubSub {
	backoff := 10 * time.Millisecond
	var ps *redis.PubSub
	for {
		var err error
		if ps, err = p.open(ctx, s, sub.channels); err == nil {
			break
		}
		if !retry || ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
			if !p.isReady() {
				p.err = err
				close(p.ready)
			}
			return nil
		}
		if !p.isReady() {
			close(p.ready)
		}
		s.reportError(ctx, sub.op, sub.shard, err, backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
	p.up.Store(true)
	// Said before ready, so that what follows ready sees it.
	if retry && sub.resubscribed != nil {
		sub.resubscribed()
	}
	if !p.isReady() {
		close(p.ready)
	}
	return ps
}

// open subscribes to channels and waits for every confirmation: SSUBSCRIBE,
// or SUBSCRIBE when the server has no SPUBLISH (the scripts publish the
// same way). close may interrupt it.
func (p *subscription) open(ctx context.Context, s *Set, channels []string) (*redis.PubSub, error) {
	plain, err := s.pubsubPlain(ctx, channels[0])
	if err != nil {
		return nil, err
	}
	var ps *redis.PubSub
	if plain {
		ps = s.rdb.Subscribe(ctx, channels...)
	} else {
		ps = s.rdb.SSubscribe(ctx, channels...)
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.ps = ps // from now on, close unblocks the reads below
	}
	p.mu.Unlock()
	if closed {
		_ = ps.Close()
		return nil, context.Canceled
	}
	for left := len(channels); left > 0; {
		msg, err := ps.ReceiveTimeout(ctx, waitCleanup)
		if err != nil {
			_ = ps.Close()
			return nil, err
		}
		if _, ok := msg.(*redis.Subscription); ok {
			left--
		}
	}
	return ps, nil
}

// wakeups are the wake-ups one background loop (a Sweeper's Run, one
// Consume) listens to: one subscription per shard (on a single server, one
// for all shards), read by goroutines that record which shards were
// notified and signal the loop. Not safe for simultaneous use, except
// signal and the recording, which the goroutines do.
type wakeups struct {
	signal chan struct{} // a wake-up is waiting (buffer 1)
	mu     sync.Mutex
	woken  map[int]int64   // shard -> the earliest deadline told (ms; -1: none told)
	freed  atomic.Bool     // an owner slot was freed ("s"), or a wake-up may have been lost
	subs   []*subscription // its own subscriptions, which close ends
	// heard are the subscriptions that bring its wake-ups: subs, or those
	// a Set's Reserve calls share (one for all shards, or one per shard).
	heard []*subscription
}

// slotFreedMessage is what the scripts publish on a shard's event wake-up
// channel when they free an owner slot (slot_free in internal/store/lua/groups.lua).
const slotFreedMessage = "s"

// What wakeups record for a shard notified without a deadline: wakeNow for
// a message (events appended: look now), wakeLost for every shard after a
// (re)subscription (a wake-up may have been lost meanwhile: look now).
// wakeSlot, an owner slot freed, is not recorded per shard: it sets freed,
// as wakeLost does too.
const (
	wakeNow  = -1
	wakeLost = -2
	wakeSlot = -3
)

// listen subscribes to the channel of every shard that channel names
// (expset:{name:S}:due:wake or ...:ev:wake); op names the subscription's
// errors. A message carrying a number records it as that shard's deadline.
func (s *Set) listen(op string, channel func(*store.Keys) string) *wakeups {
	w := newWakeups()
	w.subs = s.subscribeWakes(op, channel, w.wake)
	w.heard = w.subs
	return w
}

// newWakeups returns wakeups with no subscription of their own.
func newWakeups() *wakeups {
	return &wakeups{signal: make(chan struct{}, 1), woken: map[int]int64{}}
}

// subscribeWakes subscribes to the channel of every shard (one
// subscription per shard, one for all on a single server) and tells wake
// of the shards notified: with the deadline a message carries (else
// wakeNow), or every shard of a subscription with wakeLost when it is
// (re)subscribed.
func (s *Set) subscribeWakes(op string, channel func(*store.Keys) string, wake func(shards []int, d int64)) []*subscription {
	byName := make(map[string]int, len(s.shards))
	var groups [][]int
	if _, single := s.rdb.(*redis.Client); single {
		all := make([]int, len(s.shards))
		for i := range all {
			all[i] = i
		}
		groups = [][]int{all}
	} else {
		for i := range s.shards {
			groups = append(groups, []int{i})
		}
	}
	var subs []*subscription
	for _, g := range groups {
		chs := make([]string, len(g))
		for k, i := range g {
			chs[k] = channel(&s.shards[i])
			byName[chs[k]] = i
		}
		shard := -1
		if len(g) == 1 {
			shard = g[0]
		}
		subs = append(subs, s.subscribe(subscriber{
			op: op, shard: shard, channels: chs, retry: true,
			message: func(m *redis.Message) {
				i, ok := byName[m.Channel]
				if !ok || (s.dropWake != nil && s.dropWake(m.Channel)) {
					return
				}
				d, err := strconv.ParseInt(m.Payload, 10, 64)
				switch {
				case m.Payload == slotFreedMessage:
					d = wakeSlot
				case err != nil || d < 0:
					d = wakeNow
				}
				wake([]int{i}, d)
			},
			resubscribed: func() { wake(g, wakeLost) },
			quiet:        loopPing,
		}))
	}
	return subs
}

// wake records that shards were notified (of deadline d, wakeNow or
// wakeLost; wakeSlot only sets freed) and signals the loop. wakeNow
// outranks wakeLost, which outranks any deadline.
func (w *wakeups) wake(shards []int, d int64) {
	if d == wakeSlot || d == wakeLost {
		w.freed.Store(true)
	}
	if d == wakeSlot {
		shards = nil
	}
	w.mu.Lock()
	for _, i := range shards {
		old, ok := w.woken[i]
		if !ok || old == d || (old >= 0 && (d < 0 || d < old)) || (old == wakeLost && d == wakeNow) {
			w.woken[i] = d
		}
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// poke signals the loop without recording a shard: something other than a
// wake-up asks it for a round (a retry was scheduled, a call finished).
func (w *wakeups) poke() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// take returns the shards notified since the last take, with the
// earliest deadline each was told (or wakeNow, wakeLost).
func (w *wakeups) take() map[int]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.woken) == 0 {
		return nil
	}
	m := w.woken
	w.woken = map[int]int64{}
	return m
}

// up reports whether shard i's wake-ups come: its subscription is up.
func (w *wakeups) up(i int) bool {
	switch {
	case w == nil || len(w.heard) == 0:
		return false
	case len(w.heard) == 1:
		return w.heard[0].up.Load()
	case i < len(w.heard):
		return w.heard[i].up.Load()
	}
	return false
}

// close ends the subscriptions and waits for their goroutines.
func (w *wakeups) close() {
	for _, p := range w.subs {
		p.close()
	}
}

// nextPoll returns the first time after now on the grid origin + k*every
// (origin itself when now is before it). Each shard's safety polls keep to
// a grid of their own, the shards' origins spread over the interval, so
// that their cost stays steady whatever wakes a shard in between.
func nextPoll(origin, now time.Time, every time.Duration) time.Time {
	if now.Before(origin) {
		return origin
	}
	return origin.Add((now.Sub(origin)/every + 1) * every)
}

// pollOrigin is shard i of n's safety poll grid origin for a loop started
// at start.
func pollOrigin(start time.Time, every time.Duration, i, n int) time.Time {
	return start.Add(every * time.Duration(i+1) / time.Duration(n))
}

// healthyStretch is how many safety polls of a shard pass, at most, between
// two looks at it while its subscription is up (looking).
const healthyStretch = 2

// looking reports whether a loop whose safety poll of a shard (every
// every) is due at now looks at the shard, having last looked at last
// (zero: never): at every poll while its subscription is down (up false),
// and at every healthyStretch-th while it is up. A wake-up lost costs at
// most every with the subscription down, healthyStretch times that with
// it up; a (re)subscription looks at every shard at once.
func looking(now, last time.Time, every time.Duration, up bool) bool {
	return !up || last.IsZero() || now.Sub(last) >= healthyStretch*every-every/2
}

// safetyEvery is how often a loop looks at each shard without a wake-up:
// every poll interval, stretched so that it looks at no more than 16 shards
// per poll interval (so a safety pass costs the same whatever the shard
// count).
func safetyEvery(poll time.Duration, shards int) time.Duration {
	return poll * time.Duration(max(1, (shards+15)/16))
}
