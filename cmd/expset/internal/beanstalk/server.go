package beanstalk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config is how a Server runs. The zero value serves with beanstalkd's
// defaults.
type Config struct {
	// MaxJobSize is the largest job body in bytes (beanstalkd's -z); 0 means
	// DefaultMaxJobSize.
	MaxJobSize int
	// Poll is the longest a waiting reserve goes without looking at Redis
	// again, in case a wake-up was lost; 0 means 1 s.
	Poll time.Duration
	// Logf reports errors (of Redis, mostly); nil drops them.
	Logf func(format string, args ...any)
}

// Server speaks beanstalkd's protocol to its clients and keeps every job in
// a Store. Any number of Servers on one Store serve one queue.
type Server struct {
	store *Store
	cfg   Config
	id    string // this front's random ID, in tokens and in stats
	start time.Time
	wake  *notifier

	ops        [numOps]atomic.Int64
	totalConns atomic.Int64

	mu        sync.Mutex
	conns     map[*conn]struct{}
	tubes     map[string]*tubeRef // tubes this front's connections use or watch
	producers int
	workers   int
	waiting   int
	nextConn  uint64

	forget chan uint64 // deleted jobs to drop from the job -> tube map
}

// tubeRef counts this front's connections on a tube.
type tubeRef struct{ using, watching, waiting int }

// NewServer returns a Server on store.
func NewServer(store *Store, cfg Config) *Server {
	if cfg.MaxJobSize <= 0 {
		cfg.MaxJobSize = DefaultMaxJobSize
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Server{
		store:  store,
		cfg:    cfg,
		id:     hex.EncodeToString(b[:]),
		start:  time.Now(),
		wake:   newNotifier(),
		conns:  make(map[*conn]struct{}),
		tubes:  make(map[string]*tubeRef),
		forget: make(chan uint64, 4096),
	}
}

// Serve accepts connections on ln and serves them until ctx ends; then it
// closes ln and every connection (putting the jobs they hold back ready, as
// beanstalkd does when a client goes) and returns nil. It returns an error
// when ln fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.wake.listen(ctx, s.store, s.cfg.Logf) }()
	go func() { defer wg.Done(); s.forgetLoop(ctx) }()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var err error
	for {
		nc, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("beanstalk: accept: %w", aerr)
			}
			break
		}
		c := s.newConn(nc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.serve(ctx)
		}()
	}
	cancel()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.SetDeadline(time.Now()) // wakes its reads and writes
	}
	s.mu.Unlock()
	wg.Wait()
	return err
}

// forgetLoop drops deleted jobs from the job -> tube map, in batches, until
// ctx ends (and then what is queued). A failure is reported and the entries
// stay: an entry without its job answers NOT_FOUND like no entry.
func (s *Server) forgetLoop(ctx context.Context) {
	batch := make([]uint64, 0, 256)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := s.store.Forget(fctx, batch...); err != nil {
			s.cfg.Logf("beanstalkd: drop %d deleted jobs from the job map: %v", len(batch), err)
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case id := <-s.forget:
			batch = append(batch, id)
		more:
			for len(batch) < cap(batch) {
				select {
				case id := <-s.forget:
					batch = append(batch, id)
				default:
					break more
				}
			}
			flush()
		case <-ctx.Done():
			for {
				select {
				case id := <-s.forget:
					batch = append(batch, id)
				default:
					flush()
					return
				}
			}
		}
	}
}

// deleted queues job id for dropping from the job -> tube map.
func (s *Server) deleted(ctx context.Context, id uint64) {
	select {
	case s.forget <- id:
	default: // full: drop it now
		if err := s.store.Forget(ctx, id); err != nil {
			s.cfg.Logf("beanstalkd: drop deleted job %d from the job map: %v", id, err)
		}
	}
}

func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextConn++
	c := &conn{
		s:     s,
		nc:    nc,
		token: fmt.Sprintf("%s:%d", s.id, s.nextConn),
		use:   "default",
		watch: []string{"default"},
		held:  make(map[uint64]*held),
	}
	s.conns[c] = struct{}{}
	s.totalConns.Add(1)
	s.ref("default").using++
	s.ref("default").watching++
	return c
}

// ref returns the local counts of tube; s.mu is held.
func (s *Server) ref(tube string) *tubeRef {
	r := s.tubes[tube]
	if r == nil {
		r = &tubeRef{}
		s.tubes[tube] = r
	}
	return r
}

// unref drops tube's local counts when nothing here refers to it; s.mu is held.
func (s *Server) unref(tube string) {
	if r := s.tubes[tube]; r != nil && r.using == 0 && r.watching == 0 && r.waiting == 0 {
		delete(s.tubes, tube)
	}
}

// localTube returns this front's counts of tube and whether it refers to
// the tube ("default" always exists, as in beanstalkd).
func (s *Server) localTube(tube string) (tubeRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.tubes[tube]
	if r == nil {
		return tubeRef{}, tube == "default"
	}
	return *r, true
}

// localTubes returns "default" and, sorted, the other tubes this front's
// connections refer to.
func (s *Server) localTubes() []string {
	s.mu.Lock()
	var names []string
	for t := range s.tubes {
		if t != "default" {
			names = append(names, t)
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	return append([]string{"default"}, names...)
}

// errClosed ends a connection's loop without an error to report.
var errClosed = errors.New("connection closed")
