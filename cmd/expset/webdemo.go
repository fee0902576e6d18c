package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// webDemoSet is the set "expset web --demo" fills, deleted before and after.
const webDemoSet = "expset-web-demo"

// webDemo connects for "expset web --demo": to --redis (or $REDIS_URL) when
// given, else to a redis-server of its own started from PATH (its stream
// counters draw the rates), else to an embedded miniredis. It fills the
// demo set and keeps it moving (orders placed, a sweeper, a consumer group
// that succeeds and one that often fails) until the connection is closed.
func (a *app) webDemo(ctx context.Context, names []string) (*conn, []string, error) {
	if len(names) > 0 {
		return nil, nil, fmt.Errorf("%w: --demo shows its own set: name no SET", errUsage)
	}
	var c *conn
	var err error
	if a.redis == "" && os.Getenv("REDIS_URL") == "" {
		c, err = startRedisServer(ctx)
		if err != nil {
			fmt.Fprintf(a.stderr, "expset web: no redis-server to start (%v): using an embedded Redis, without rates\n", err)
			c, err = a.connect(ctx, true)
		}
	} else {
		c, err = a.connect(ctx, false)
	}
	if err != nil {
		return nil, nil, err
	}
	if _, err := expset.Drop(ctx, c.rdb, webDemoSet); err != nil {
		c.close()
		return nil, nil, err
	}
	set, err := expset.Open(ctx, c.rdb, webDemoSet, expset.WithShards(4), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		c.close()
		return nil, nil, err
	}
	dctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	logErr := func(what string, err error) {
		if err != nil && dctx.Err() == nil {
			fmt.Fprintf(a.stderr, "expset web: demo %s: %v\n", what, err)
		}
	}
	if err := seedDemo(ctx, set); err != nil {
		cancel()
		c.close()
		return nil, nil, err
	}
	run := func(what string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A failure is reported and the loop started again after a pause.
			for dctx.Err() == nil {
				logErr(what, f(dctx))
				_ = sleep(dctx, time.Second)
			}
		}()
	}
	run("orders", func(ctx context.Context) error { return placeOrders(ctx, set) })
	run("sweeper", func(ctx context.Context) error {
		w, err := expset.NewSweeper(set, expset.WithPollInterval(200*time.Millisecond))
		if err != nil {
			return err
		}
		return w.Run(ctx)
	})
	run("billing", func(ctx context.Context) error {
		return set.Consume(ctx, "billing", "billing-1", func(ctx context.Context, e expset.Expiry) error {
			if rand.IntN(4) == 0 {
				return errors.New("payment gateway: timeout after 3s")
			}
			return nil
		}, expset.WithMaxAttempts(2), expset.WithLeaseTTL(2*time.Second), expset.WithPollInterval(100*time.Millisecond), expset.WithoutSweeper())
	})
	run("email", func(ctx context.Context) error {
		return set.Consume(ctx, "email", "mailer-1", func(ctx context.Context, e expset.Expiry) error {
			if len(e.Payload) == 0 {
				return errors.New("no address for " + e.Owner)
			}
			return sleep(ctx, 20*time.Millisecond)
		}, expset.WithMaxAttempts(3), expset.WithPollInterval(100*time.Millisecond), expset.WithoutSweeper())
	})
	inner := c.close
	c.close = func() {
		cancel()
		wg.Wait()
		cleanup(&conn{rdb: c.rdb}, set.Name())
		inner()
	}
	return c, []string{webDemoSet}, nil
}

// seedDemo places a few hundred orders over a hundred users, some with a
// JSON payload, some without, their deadlines from a few seconds to an hour,
// and two recurring schedules.
func seedDemo(ctx context.Context, set *expset.Set) error {
	report := expset.WithPayload([]byte(`{"to":"ops@example.com"}`))
	if _, err := set.PutSchedule(ctx, "stale-cart-report", "@every 30s", report); err != nil {
		return err
	}
	if _, err := set.PutSchedule(ctx, "nightly-invoices", "CRON_TZ=Europe/Paris 0 3 * * *", report); err != nil {
		return err
	}
	for u := 1; u <= 120; u++ {
		owner := "user-" + strconv.Itoa(u)
		for o := 1; o <= 1+u%5; o++ {
			if err := demoOrder(ctx, set, owner, fmt.Sprintf("order-%d-%d", u, o), time.Duration(5+rand.IntN(3600))*time.Second); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeOrders places an order every 50ms that lives 2 to 20 seconds.
func placeOrders(ctx context.Context, set *expset.Set) error {
	for n := 0; ; n++ {
		owner := "user-" + strconv.Itoa(1+rand.IntN(400))
		if err := demoOrder(ctx, set, owner, "order-"+strconv.FormatInt(time.Now().UnixNano(), 36), time.Duration(2000+rand.IntN(18000))*time.Millisecond); err != nil {
			return err
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil
		}
	}
}

func demoOrder(ctx context.Context, set *expset.Set, owner, order string, ttl time.Duration) error {
	var opts []expset.AddOption
	if rand.IntN(5) > 0 {
		opts = append(opts, expset.WithPayload(fmt.Appendf(nil, `{"order":%q,"user":%q,"amount_cents":%d,"email":"%s@example.com"}`, order, owner, 500+rand.IntN(20000), owner)))
	}
	_, err := set.Add(ctx, owner, order, ttl, opts...)
	return err
}

// startRedisServer starts redis-server from PATH on a free loopback port,
// without persistence, in a temporary directory; closing the connection
// stops it and removes the directory.
func startRedisServer(ctx context.Context) (*conn, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	dir, err := os.MkdirTemp("", "expset-web-demo-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	for end := time.Now().Add(10 * time.Second); ; {
		if err = rdb.Ping(ctx).Err(); err == nil {
			break
		}
		if time.Now().After(end) || ctx.Err() != nil {
			rdb.Close()
			stop()
			return nil, fmt.Errorf("redis-server on port %s: %w", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &conn{rdb: rdb, desc: "redis-server (demo) at 127.0.0.1:" + port, close: func() { rdb.Close(); stop() }}, nil
}
