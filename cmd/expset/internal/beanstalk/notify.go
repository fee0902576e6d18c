package beanstalk

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier wakes the reserves waiting on a tube when a change to it is
// published (put, release, kick, pause: anything after which a reserve may
// get a job or should look again at when to).
type notifier struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

func newNotifier() *notifier {
	return &notifier{subs: make(map[string]map[chan struct{}]struct{})}
}

// subscribe returns a channel that receives (at most one pending value) when
// any of tubes changes, and the function that stops it.
func (n *notifier) subscribe(tubes []string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	for _, t := range tubes {
		m := n.subs[t]
		if m == nil {
			m = make(map[chan struct{}]struct{})
			n.subs[t] = m
		}
		m[ch] = struct{}{}
	}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		for _, t := range tubes {
			if m := n.subs[t]; m != nil {
				delete(m, ch)
				if len(m) == 0 {
					delete(n.subs, t)
				}
			}
		}
		n.mu.Unlock()
	}
}

// fire wakes every subscriber of tube.
func (n *notifier) fire(tube string) {
	n.mu.Lock()
	for ch := range n.subs[tube] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}

// fireAll wakes every subscriber.
func (n *notifier) fireAll() {
	n.mu.Lock()
	for _, m := range n.subs {
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	n.mu.Unlock()
}

// listen relays the store's wake-up channel to n until ctx ends. When the
// subscription fails it reports the error, keeps trying (go-redis
// subscribes again on a new connection), and once it is back wakes every
// waiting reserve, which looks again at what it may have missed; the
// waiting reserves' bounded poll covers the time between.
func (n *notifier) listen(ctx context.Context, s *Store, logf func(string, ...any)) {
	ps := s.rdb.Subscribe(ctx, s.channel)
	defer ps.Close()
	// A blocked Receive does not see ctx end (go-redis reads without a
	// deadline); closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	failing := false
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !failing {
				logf("beanstalkd: wake-ups (pub/sub %s, retrying; reserves poll meanwhile): %v", s.channel, err)
			}
			failing = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		if failing {
			logf("beanstalkd: wake-ups: subscribed again")
			failing = false
			backoff = 50 * time.Millisecond
			n.fireAll()
		}
		if m, ok := msg.(*redis.Message); ok {
			n.fire(m.Payload)
		}
	}
}
