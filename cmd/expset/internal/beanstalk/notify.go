package beanstalk

import (
	"context"
	"sync"
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

// listen relays the store's wake-up channel to n until ctx ends. go-redis
// resubscribes after a lost connection by itself; what is published
// meanwhile is caught by the waiting reserves' bounded poll.
func (n *notifier) listen(ctx context.Context, s *Store) {
	ps := s.rdb.Subscribe(ctx, s.channel)
	defer ps.Close()
	msgs := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			n.fire(m.Payload)
		}
	}
}
