package beanstalk

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// version is what stats reports as the server's version.
const version = "1.12-expset"

// fmtJobStats is stats-job's YAML, field for field as beanstalkd writes it.
func fmtJobStats(id uint64, tube string, st *JobStats) string {
	left := int64(0)
	if st.State == "reserved" || st.State == "delayed" {
		left = (st.Deadline - st.Now) / 1000
	}
	return fmt.Sprintf("---\nid: %d\ntube: %s\nstate: %s\npri: %d\nage: %d\ndelay: %d\nttr: %d\n"+
		"time-left: %d\nfile: 0\nreserves: %d\ntimeouts: %d\nreleases: %d\nburies: %d\nkicks: %d\n",
		id, tube, st.State, st.Pri, (st.Now-st.Created)/1000, st.Delay, st.TTR,
		left, st.Reserves, st.Timeouts, st.Releases, st.Buries, st.Kicks)
}

// fmtList is a YAML list of names.
func fmtList(names []string) string {
	var b strings.Builder
	b.WriteString("---\n")
	for _, n := range names {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

// tubeExists reports whether tube exists as beanstalkd would say: it holds
// a job, or a connection (of this front) uses or watches it.
func (s *Server) tubeExists(ctx context.Context, tube string) (bool, error) {
	if _, ok := s.localTube(tube); ok {
		return true, nil
	}
	st, err := s.store.StatsTube(ctx, tube)
	if err != nil {
		return false, err
	}
	return !st.Empty(), nil
}

// existingTubes lists the tubes that exist: "default", those this front's
// connections refer to, and those holding jobs.
func (s *Server) existingTubes(ctx context.Context) ([]string, error) {
	local := s.localTubes()
	all, err := s.store.Tubes(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(all)
	names := local
	for _, t := range all {
		if slices.Contains(names, t) {
			continue
		}
		st, err := s.store.StatsTube(ctx, t)
		if err != nil {
			return nil, err
		}
		if !st.Empty() {
			names = append(names, t)
		}
	}
	return names, nil
}

func (c *conn) statsTube(ctx context.Context, tube string) {
	local, known := c.s.localTube(tube)
	st, err := c.s.store.StatsTube(ctx, tube)
	if err != nil {
		c.internal("stats-tube", err)
		return
	}
	if !known && st.Empty() {
		c.reply(msgNotFound)
		return
	}
	c.data(fmt.Sprintf("---\nname: %s\ncurrent-jobs-urgent: %d\ncurrent-jobs-ready: %d\n"+
		"current-jobs-reserved: %d\ncurrent-jobs-delayed: %d\ncurrent-jobs-buried: %d\ntotal-jobs: %d\n"+
		"current-using: %d\ncurrent-watching: %d\ncurrent-waiting: %d\ncmd-delete: %d\ncmd-pause-tube: %d\n"+
		"pause: %d\npause-time-left: %d\n",
		tube, st.Urgent, st.Ready, st.Reserved, st.Delayed, st.Buried, st.Total,
		local.using, local.watching, local.waiting, st.Deletes, st.Pauses, st.Pause, st.PauseLeftMS/1000))
}

func (c *conn) stats(ctx context.Context) {
	s := c.s
	tubes, err := s.existingTubes(ctx)
	if err != nil {
		c.internal("stats", err)
		return
	}
	var sum TubeStats
	for _, t := range tubes {
		st, err := s.store.StatsTube(ctx, t)
		if err != nil {
			c.internal("stats", err)
			return
		}
		sum.Urgent += st.Urgent
		sum.Ready += st.Ready
		sum.Reserved += st.Reserved
		sum.Delayed += st.Delayed
		sum.Buried += st.Buried
		sum.Total += st.Total
		sum.Timeouts += st.Timeouts
	}
	s.mu.Lock()
	conns, producers, workers, waiting := len(s.conns), s.producers, s.workers, s.waiting
	s.mu.Unlock()
	host, _ := os.Hostname()
	ut, st := rusage()
	var b strings.Builder
	fmt.Fprintf(&b, "---\ncurrent-jobs-urgent: %d\ncurrent-jobs-ready: %d\ncurrent-jobs-reserved: %d\n"+
		"current-jobs-delayed: %d\ncurrent-jobs-buried: %d\n",
		sum.Urgent, sum.Ready, sum.Reserved, sum.Delayed, sum.Buried)
	for _, o := range []op{opPut, opPeekJob, opPeekReady, opPeekDelayed, opPeekBuried, opReserve,
		opReserveTimeout, opDelete, opRelease, opUse, opWatch, opIgnore, opBury, opKick, opTouch, opStats,
		opStatsJob, opStatsTube, opListTubes, opListTubeUsed, opListTubesWatched, opPauseTube} {
		fmt.Fprintf(&b, "cmd-%s: %d\n", opNames[o], s.ops[o].Load())
	}
	fmt.Fprintf(&b, "job-timeouts: %d\ntotal-jobs: %d\nmax-job-size: %d\ncurrent-tubes: %d\n"+
		"current-connections: %d\ncurrent-producers: %d\ncurrent-workers: %d\ncurrent-waiting: %d\n"+
		"total-connections: %d\npid: %d\nversion: \"%s\"\nrusage-utime: %s\nrusage-stime: %s\nuptime: %d\n"+
		"binlog-oldest-index: 0\nbinlog-current-index: 0\nbinlog-records-migrated: 0\n"+
		"binlog-records-written: 0\nbinlog-max-size: 10485760\ndraining: false\nid: %s\n"+
		"hostname: %s\nos: %s\nplatform: %s\n",
		sum.Timeouts, sum.Total, s.cfg.MaxJobSize, len(tubes), conns, producers, workers, waiting,
		s.totalConns.Load(), os.Getpid(), version, ut, st, int64(time.Since(s.start)/time.Second),
		s.id, host, runtime.GOOS, runtime.GOARCH)
	c.data(b.String())
}
