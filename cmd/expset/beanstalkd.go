package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/expset/expset/cmd/expset/internal/beanstalk"
	"github.com/spf13/cobra"
)

// beanstalkdOpts are the flags of "expset beanstalkd".
type beanstalkdOpts struct {
	listen  string
	maxJob  int
	prefix  string
	poll    time.Duration
	connect int
}

func (a *app) beanstalkdCmd() *cobra.Command {
	var o beanstalkdOpts
	cmd := &cobra.Command{
		Use:   "beanstalkd [--redis URL] [--listen ADDR] [-z BYTES] [--prefix P]",
		Short: "a server speaking beanstalkd's protocol, its jobs in Redis (any number on one Redis serve one queue)",
		Long: "beanstalkd serves beanstalkd 1.12's protocol until interrupted, keeping every tube and job in Redis\n" +
			"(or a Redis Cluster), so several of them serve one queue and a front that dies loses nothing: the\n" +
			"jobs its clients held come back ready when their time to run ends. See docs/beanstalkd.md.",
		Example: "expset beanstalkd --redis redis://localhost:6379                 # on 127.0.0.1:11300\n" +
			"expset beanstalkd --redis redis://r:6379 --listen 0.0.0.0:11300 -z 1048576",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.maxJob < 1 || o.maxJob > beanstalk.MaxMaxJobSize {
				return fmt.Errorf("%w: -z %d: want 1 to %d", errUsage, o.maxJob, beanstalk.MaxMaxJobSize)
			}
			if o.poll < 10*time.Millisecond {
				return fmt.Errorf("%w: --poll %v: want 10ms or more", errUsage, o.poll)
			}
			return a.beanstalkd(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.listen, "listen", "l", "127.0.0.1:11300", "address to serve on (host:port; port 0 picks a free one)")
	f.IntVarP(&o.maxJob, "max-job-size", "z", beanstalk.DefaultMaxJobSize, "largest job body in bytes")
	f.StringVar(&o.prefix, "prefix", "beanstalkd", "prefix of the Redis keys; fronts with one prefix serve one queue")
	f.DurationVar(&o.poll, "poll", time.Second, "the longest a waiting reserve goes without looking at Redis (wake-ups come by pub/sub first)")
	f.IntVar(&o.connect, "redis-pool", 0, "Redis connections per server at least (0: go-redis's default)")
	return cmd
}

func (a *app) beanstalkd(ctx context.Context, o beanstalkdOpts) error {
	c, err := a.connectPool(ctx, false, o.connect)
	if err != nil {
		return err
	}
	defer c.close()
	store, err := beanstalk.NewStore(c.rdb, o.prefix)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	srv := beanstalk.NewServer(store, beanstalk.Config{
		MaxJobSize: o.maxJob,
		Poll:       o.poll,
		Logf:       func(format string, args ...any) { fmt.Fprintf(a.stderr, format+"\n", args...) },
	})
	fmt.Fprintf(a.stdout, "expset beanstalkd: serving beanstalkd's protocol on %s, jobs in %s under %s:, until interrupted\n", ln.Addr(), c.desc, o.prefix)
	err = srv.Serve(ctx, ln)
	fmt.Fprintln(a.stdout, "expset beanstalkd: stopped")
	return err
}
