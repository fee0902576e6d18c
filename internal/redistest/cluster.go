package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Roles reported in Node.Role.
const (
	RoleMaster  = "master"
	RoleReplica = "replica"
)

const (
	// NumSlots is the number of hash slots of a Redis Cluster.
	NumSlots = 16384
	// busPortOffset is how far above its client port a cluster node binds
	// its cluster bus.
	busPortOffset = 10000
	// clusterLimit bounds every wait of the cluster harness: creating the
	// cluster, a failover, a restart. They take seconds, and over a minute
	// on a machine whose every core is busy (seen creating three clusters
	// at once beside a callgrind run); the limit only turns a hang into a
	// clear failure.
	clusterLimit = 3 * time.Minute
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Masters is the number of masters (default 3; redis-cli needs at least 3).
	Masters int
	// ReplicasPerMaster is the number of replicas of each master (default 0).
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout (default 1s): how long a node may be
	// unreachable before it counts as failing and its replica takes over.
	NodeTimeout time.Duration
	// ExtraArgs are extra redis-server arguments for every node, e.g.
	// "--maxmemory", "64mb". They come last, so they override the defaults.
	ExtraArgs []string
	// Binaries are the server binaries of the nodes in start order (masters
	// first, then replicas), for clusters of mixed versions; a missing or
	// empty entry means Binary.
	Binaries []string
}

// Cluster is a Redis Cluster of redis-server processes started by
// StartCluster or SharedCluster.
type Cluster struct {
	root    string    // temporary directory, one subdirectory per node
	servers []*Server // in start order
	probes  []*redis.Client

	mu   sync.Mutex
	last []*Node // last topology read, for Nodes when no node answers
}

// Node is a snapshot of one cluster node, taken when it was returned.
type Node struct {
	Addr     string
	ID       string   // cluster node ID
	Role     string   // RoleMaster or RoleReplica
	MasterID string   // for a replica, the ID of its master
	Slots    [][2]int // inclusive slot ranges a master serves
	Failed   bool     // flagged as failing (fail or fail?) by the reporting node
	Server   *Server  // the process: Kill, Pause, Resume, Restart it
}

// Serves reports whether n is a master serving slot.
func (n *Node) Serves(slot int) bool {
	if n.Role != RoleMaster || n.Failed {
		return false
	}
	for _, r := range n.Slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

var (
	sharedClusterOnce sync.Once
	sharedCluster     *Cluster
	sharedClusterErr  error
)

// SharedCluster returns a cluster of 3 masters without replicas, started on
// first use and shared by the whole test binary; Main stops it. Tests must
// keep to their own keys and must not stop, pause or fail over its nodes (use
// StartCluster for that). Its node timeout is 5s, so a busy machine does not
// make a node look failed. It skips tb (or fails it, see Required) when
// redis-server or redis-cli is missing.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	sharedClusterOnce.Do(func() {
		sharedCluster, sharedClusterErr = startCluster(ClusterOptions{NodeTimeout: 5 * time.Second})
	})
	if sharedClusterErr != nil {
		clusterFailed(tb, sharedClusterErr)
	}
	return sharedCluster
}

func stopSharedCluster() {
	if sharedCluster != nil {
		sharedCluster.stop()
	}
}

// StartCluster starts a dedicated cluster for tb, waits until it is healthy
// (see WaitHealthy) and stops it when tb ends. It skips tb (or fails it, see
// Required) when redis-server or redis-cli is missing.
func StartCluster(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	c, err := startCluster(opts)
	if err != nil {
		clusterFailed(tb, err)
	}
	tb.Cleanup(c.stop)
	return c
}

// unavailableError marks errors that mean "no Redis Cluster can be had here"
// (a missing binary) rather than a broken harness.
type unavailableError struct{ error }

// clusterFailed skips tb (see Unavailable) when err says a binary is missing,
// and fails it otherwise.
func clusterFailed(tb testing.TB, err error) {
	tb.Helper()
	var u unavailableError
	if errors.As(err, &u) {
		Unavailable(tb, err.Error())
	}
	tb.Fatalf("redistest: starting a Redis Cluster: %v", err)
}

func startCluster(opts ClusterOptions) (c *Cluster, err error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	if opts.Masters < 3 || opts.ReplicasPerMaster < 0 {
		return nil, fmt.Errorf("cluster of %d masters with %d replicas each: need at least 3 masters", opts.Masters, opts.ReplicasPerMaster)
	}
	cli, err := CLI()
	if err != nil {
		return nil, unavailableError{fmt.Errorf("the Redis Cluster tests need a server and its CLI: %w", err)}
	}
	root, err := os.MkdirTemp("", "expset-cluster-*")
	if err != nil {
		return nil, err
	}
	// The deferred stop holds the cluster itself: an error return sets the
	// named result c to nil before deferred calls run.
	made := &Cluster{root: root}
	c = made
	defer func() {
		if err != nil {
			made.stop()
		}
	}()
	args := func(port int) []string {
		return append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			// A replica may always take over, however long its link was down.
			"--cluster-replica-validity-factor", "0",
			// Full syncs start at once, not after the default 5s delay.
			"--repl-diskless-sync-delay", "0",
		}, opts.ExtraArgs...)
	}
	for i := 0; i < opts.Masters*(1+opts.ReplicasPerMaster); i++ {
		dir := filepath.Join(root, fmt.Sprintf("node-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		bin := ""
		if i < len(opts.Binaries) {
			bin = opts.Binaries[i]
		}
		s, err := start(dir, bin, freeClusterPort, args)
		if err != nil {
			return nil, err
		}
		c.servers = append(c.servers, s)
		c.probes = append(c.probes, probeClient(s.Addr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterLimit)
	defer cancel()
	argv := append([]string{"--cluster", "create"}, c.Addrs()...)
	argv = append(argv, "--cluster-replicas", strconv.Itoa(opts.ReplicasPerMaster), "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v; output: %s", err, lastChars(string(out), 600))
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// freeClusterPort returns a loopback port that, like port+10000 (the cluster
// bus), was free a moment ago.
func freeClusterPort() (int, error) {
	for i := 0; i < 100; i++ {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		if port+busPortOffset <= 65535 && portFree(port+busPortOffset) {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port pair (port, port+10000) found")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// stop stops every node (in parallel), releases their ports (see Server)
// and removes the cluster's directory.
func (c *Cluster) stop() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.Close() }()
	}
	wg.Wait()
	for _, p := range c.probes {
		_ = p.Close()
	}
	_ = os.RemoveAll(c.root)
}

// Addrs returns the addresses of all nodes, in start order, whether running or not.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		out[i] = s.Addr
	}
	return out
}

// Client returns a new cluster client of c, closed when tb ends. Its options
// suit tests: short dial and read timeouts, enough redirects and retries to
// ride out a failover, and a failing node avoided for 1s only. opt functions
// may change them.
func (c *Cluster) Client(tb testing.TB, opt ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		MaxRedirects:          8,
		DialTimeout:           time.Second,
		ReadTimeout:           3 * time.Second,
		WriteTimeout:          3 * time.Second,
		MinRetryBackoff:       10 * time.Millisecond,
		MaxRetryBackoff:       250 * time.Millisecond,
		FailingTimeoutSeconds: 1,
		DisableIdentity:       true, // CLIENT SETINFO is 7.2+
	}
	for _, f := range opt {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Nodes returns every node of c in start order, with roles and slots as the
// first running node that answers CLUSTER NODES reports them (after
// WaitHealthy all nodes agree). When no node answers it returns the last
// topology it read.
func (c *Cluster) Nodes() []*Node {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.topology(ctx)
	if err != nil {
		c.mu.Lock()
		nodes = cloneNodes(c.last)
		c.mu.Unlock()
	}
	return nodes
}

// MasterFor returns the master serving key's slot (see KeySlot) according to
// Nodes, or nil when no master serves it (e.g. during a failover).
func (c *Cluster) MasterFor(key string) *Node {
	return masterOf(c.Nodes(), KeySlot(key))
}

func masterOf(nodes []*Node, slot int) *Node {
	for _, n := range nodes {
		if n.Serves(slot) {
			return n
		}
	}
	return nil
}

// WaitHealthy waits until every running node reports cluster_state:ok and all
// 16384 slots ok, every replica's link to its master is up, and all running
// nodes agree on the topology, which lists every running node as healthy and
// no stopped one as healthy. It returns an error saying what was still wrong
// when ctx ends first. A paused node never answers, so it keeps the cluster
// unhealthy.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, "cluster not healthy", func(ctx context.Context) error {
		_, err := c.healthy(ctx)
		return err
	})
}

// Failover makes a replica of master take over with a graceful CLUSTER
// FAILOVER, waits until it serves master's slots, master has become its
// replica and the cluster is healthy, and returns the new master. It fails tb
// when master has no running replica or the failover does not complete.
func (c *Cluster) Failover(tb testing.TB, master *Node) *Node {
	tb.Helper()
	return c.takeOver(tb, master, false)
}

// KillMaster kills master with SIGKILL, waits until one of its replicas has
// been promoted to serve its slots and the cluster is healthy again, and
// returns the new master. The killed node stays down (master.Server.Restart
// brings it back as a replica). It fails tb when master has no running replica
// or no replica takes over.
func (c *Cluster) KillMaster(tb testing.TB, master *Node) *Node {
	tb.Helper()
	return c.takeOver(tb, master, true)
}

// takeOver kills master or has its replica run CLUSTER FAILOVER, then waits
// until the cluster is healthy, master's first slot is served by another
// node and, after CLUSTER FAILOVER, master is a replica of that node, which
// it returns.
func (c *Cluster) takeOver(tb testing.TB, master *Node, kill bool) *Node {
	tb.Helper()
	old, replica := c.masterAndReplica(tb, master)
	ctx, cancel := context.WithTimeout(context.Background(), clusterLimit)
	defer cancel()
	how := "CLUSTER FAILOVER on " + replica.Addr
	if kill {
		how = "SIGKILL"
		old.Server.Kill()
	} else if err := c.probe(replica.Server).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		tb.Fatalf("redistest: %s: %v", how, err)
	}
	slot := old.Slots[0][0]
	var owner *Node
	err := poll(ctx, "no replica took over", func(ctx context.Context) error {
		nodes, err := c.healthy(ctx)
		if err != nil {
			return err
		}
		owner = masterOf(nodes, slot)
		if owner == nil || owner.ID == old.ID {
			return fmt.Errorf("slot %d is still served by %s", slot, old.Addr)
		}
		for _, n := range nodes {
			if !kill && n.ID == old.ID && (n.Role != RoleReplica || n.MasterID != owner.ID) {
				return fmt.Errorf("old master %s is %s, not yet a replica of %s", old.Addr, n.Role, owner.Addr)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: failover of master %s after %s: %v", old.Addr, how, err)
	}
	return owner
}

// masterAndReplica returns a fresh snapshot of master and one of its running
// replicas, failing tb when master is not a master or has no replica.
func (c *Cluster) masterAndReplica(tb testing.TB, master *Node) (old, replica *Node) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := c.topology(ctx)
	if err != nil {
		tb.Fatalf("redistest: reading the cluster topology: %v", err)
	}
	for _, n := range nodes {
		switch {
		case n.ID == master.ID:
			old = n
		case n.Role == RoleReplica && n.MasterID == master.ID && !n.Failed && n.Server.Running() && replica == nil:
			replica = n
		}
	}
	switch {
	case old == nil || old.Role != RoleMaster || len(old.Slots) == 0:
		tb.Fatalf("redistest: %s (%s) is not a master serving slots", master.Addr, master.ID)
	case replica == nil:
		tb.Fatalf("redistest: master %s has no running replica to take over", master.Addr)
	}
	return old, replica
}

// poll calls check until it succeeds or ctx ends, and then returns the last
// error check gave before ctx ended.
func poll(ctx context.Context, what string, check func(context.Context) error) error {
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w; last check: %v", what, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) probe(s *Server) *redis.Client {
	for i, t := range c.servers {
		if t == s {
			return c.probes[i]
		}
	}
	return nil
}

// topology reads CLUSTER NODES from the first running node that answers.
func (c *Cluster) topology(ctx context.Context) ([]*Node, error) {
	err := errors.New("no node is running")
	for i, s := range c.servers {
		if !s.Running() {
			continue
		}
		var nodes []*Node
		if nodes, err = c.readNodes(ctx, c.probes[i]); err == nil {
			return nodes, nil
		}
		err = fmt.Errorf("%s: %w", s.Addr, err)
	}
	return nil, err
}

// readNodes reads and parses CLUSTER NODES from p, attaches each node's
// Server, sorts them in start order and remembers them for Nodes.
func (c *Cluster) readNodes(ctx context.Context, p *redis.Client) ([]*Node, error) {
	txt, err := p.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	nodes, err := parseClusterNodes(txt)
	if err != nil {
		return nil, err
	}
	index := map[*Node]int{}
	for _, n := range nodes {
		index[n] = len(c.servers)
		for i, s := range c.servers {
			if strings.HasSuffix(n.Addr, ":"+strconv.Itoa(s.Port)) {
				n.Addr, n.Server, index[n] = s.Addr, s, i
			}
		}
	}
	sort.SliceStable(nodes, func(i, j int) bool { return index[nodes[i]] < index[nodes[j]] })
	c.mu.Lock()
	c.last = cloneNodes(nodes)
	c.mu.Unlock()
	return nodes, nil
}

// healthy checks every running node once (see WaitHealthy) and returns the
// agreed topology.
func (c *Cluster) healthy(ctx context.Context) ([]*Node, error) {
	var agreed []*Node
	var want, wantFrom string
	for i, s := range c.servers {
		if !s.Running() {
			continue
		}
		p := c.probes[i]
		txt, err := p.ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
		}
		info := parseInfo(txt)
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != strconv.Itoa(NumSlots) {
			return nil, fmt.Errorf("%s: cluster_state:%s cluster_slots_ok:%s", s.Addr, info["cluster_state"], info["cluster_slots_ok"])
		}
		repl, err := Info(ctx, p, "replication")
		if err != nil {
			return nil, fmt.Errorf("%s: INFO replication: %w", s.Addr, err)
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return nil, fmt.Errorf("%s: replica with master_link_status:%s", s.Addr, repl["master_link_status"])
		}
		nodes, err := c.readNodes(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr, err)
		}
		sig, err := c.signature(nodes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Addr, err)
		}
		switch {
		case agreed == nil:
			agreed, want, wantFrom = nodes, sig, s.Addr
		case sig != want:
			return nil, fmt.Errorf("%s and %s disagree on the topology:\n%s\nversus\n%s", wantFrom, s.Addr, want, sig)
		}
	}
	if agreed == nil {
		return nil, errors.New("no node is running")
	}
	return agreed, nil
}

// signature describes the healthy part of one node's view of the cluster, for
// comparing views. It fails when the view misses a running node or counts a
// stopped one as healthy.
func (c *Cluster) signature(nodes []*Node) (string, error) {
	var lines []string
	listed := map[*Server]bool{}
	for _, n := range nodes {
		if n.Failed {
			continue
		}
		if n.Server != nil {
			if !n.Server.Running() {
				return "", fmt.Errorf("stopped node %s is still listed as healthy", n.Addr)
			}
			listed[n.Server] = true
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %s %v", n.Addr, n.ID, n.Role, n.MasterID, n.Slots))
	}
	for _, s := range c.servers {
		if s.Running() && !listed[s] {
			return "", fmt.Errorf("running node %s is not listed as healthy", s.Addr)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// parseClusterNodes parses CLUSTER NODES output. Nodes still in handshake or
// without an address are left out.
func parseClusterNodes(txt string) ([]*Node, error) {
	var nodes []*Node
	for _, line := range strings.Split(strings.TrimSpace(txt), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		flags := "," + f[2] + ","
		if strings.Contains(flags, ",handshake,") || strings.Contains(flags, ",noaddr,") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := &Node{Addr: addr, ID: f[0], Role: RoleMaster, Failed: strings.Contains(flags, ",fail")}
		if strings.Contains(flags, ",slave,") {
			n.Role, n.MasterID = RoleReplica, f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("malformed slot range %q in CLUSTER NODES line %q", r, line)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

func cloneNodes(nodes []*Node) []*Node {
	out := make([]*Node, len(nodes))
	for i, n := range nodes {
		m := *n
		m.Slots = append([][2]int(nil), n.Slots...)
		out[i] = &m
	}
	return out
}

// KeySlot returns the cluster hash slot of key, as CLUSTER KEYSLOT does:
// CRC16 (XMODEM) of the key, or of its hash tag (the part between the first
// "{" and the next "}", when not empty), modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % NumSlots
}
