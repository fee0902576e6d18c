package beanstalk

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"time"
)

// conn is one client connection.
type conn struct {
	s     *Server
	nc    net.Conn
	in    []byte // read, not yet used
	eof   error  // the read error met while waiting in a reserve, if any
	out   bytes.Buffer
	token string // names this connection in the jobs it reserves

	use      string
	watch    []string
	held     map[uint64]*held // jobs this connection has reserved
	producer bool
	worker   bool
}

// held is a job reserved by a connection: its tube and when its time to run
// ends on this machine's clock (a little after Redis's deadline).
type held struct {
	tube     string
	deadline time.Time
}

// serve runs the connection until it ends or ctx does.
func (c *conn) serve(ctx context.Context) {
	defer c.close(ctx)
	for {
		if err := c.command(ctx); err != nil {
			return
		}
	}
}

// close forgets the connection and puts the jobs it holds back ready
// (beanstalkd does the same when a client goes).
func (c *conn) close(ctx context.Context) {
	_ = c.nc.Close()
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	s.ref(c.use).using--
	s.unref(c.use)
	for _, t := range c.watch {
		s.ref(t).watching--
		s.unref(t)
	}
	if c.producer {
		s.producers--
	}
	if c.worker {
		s.workers--
	}
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := time.Now()
	for id, h := range c.held {
		if now.After(h.deadline) {
			continue
		}
		if _, err := s.store.Release(rctx, h.tube, id, c.token, 0, 0, false); err != nil {
			s.cfg.Logf("beanstalkd: put job %d back when its client left (it comes back when its time to run ends): %v", id, err)
		}
	}
}

// fill reads more input, sending what is written first.
func (c *conn) fill() error {
	if err := c.flush(); err != nil {
		return err
	}
	if c.eof != nil {
		return c.eof
	}
	var b [4096]byte
	n, err := c.nc.Read(b[:])
	c.in = append(c.in, b[:n]...)
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

func (c *conn) flush() error {
	if c.out.Len() == 0 {
		return nil
	}
	_, err := c.nc.Write(c.out.Bytes())
	c.out.Reset()
	return err
}

func (c *conn) reply(s string) { c.out.WriteString(s) }

// readLine returns the next command line without its "\r\n", as beanstalkd
// finds it: the line ends at the first "\r" of the first 224 bytes if a "\n"
// follows it; 224 bytes without an end are discarded up to the next end,
// and that line is answered BAD_FORMAT (long is true).
func (c *conn) readLine() (line string, long bool, err error) {
	for {
		w := c.in[:min(len(c.in), lineMax)]
		if len(w) >= 2 {
			if i := bytes.IndexByte(w[:len(w)-1], '\r'); i >= 0 && w[i+1] == '\n' {
				line = string(w[:i])
				c.in = c.in[i+2:]
				return line, long, nil
			}
		}
		if len(w) == lineMax {
			c.in = c.in[lineMax:]
			long = true
			continue
		}
		if err := c.fill(); err != nil {
			return "", long, err
		}
	}
}

// readN returns the next n bytes of input.
func (c *conn) readN(n int) ([]byte, error) {
	for len(c.in) < n {
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
	b := c.in[:n:n]
	c.in = c.in[n:]
	return b, nil
}

// skipN discards the next n bytes of input.
func (c *conn) skipN(n uint64) error {
	for n > 0 {
		if len(c.in) == 0 {
			if err := c.fill(); err != nil {
				return err
			}
		}
		k := min(n, uint64(len(c.in)))
		c.in = c.in[k:]
		n -= k
	}
	return nil
}

// command reads and answers one command.
func (c *conn) command(ctx context.Context) error {
	line, long, err := c.readLine()
	if err != nil {
		return err
	}
	if long || bytes.IndexByte([]byte(line), 0) >= 0 {
		c.reply(msgBadFormat)
		return nil
	}
	cmd := parseLine(line)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.dispatch(ctx, cmd)
}

func (c *conn) count(o op) { c.s.ops[o].Add(1) }

// internal answers INTERNAL_ERROR for err and reports it.
func (c *conn) internal(what string, err error) {
	c.s.cfg.Logf("beanstalkd: %s: %v", what, err)
	c.reply(msgInternalError)
}

// exact answers BAD_FORMAT and returns false when a command that takes no
// arguments has some.
func (c *conn) exact(cmd command) bool {
	if cmd.rest != "" {
		c.reply(msgBadFormat)
		return false
	}
	c.count(cmd.op)
	return true
}

func (c *conn) dispatch(ctx context.Context, cmd command) error {
	switch cmd.op {
	case opPut:
		return c.put(ctx, cmd.rest)
	case opPeekReady, opPeekDelayed, opPeekBuried:
		if c.exact(cmd) {
			kind := map[op]string{opPeekReady: "ready", opPeekDelayed: "delayed", opPeekBuried: "buried"}[cmd.op]
			j, err := c.s.store.Peek(ctx, c.use, kind, 0)
			c.found(j, err)
		}
	case opPeekJob:
		tube, id, ok := c.jobArg(ctx, cmd)
		if !ok {
			return nil
		}
		j, err := c.s.store.Peek(ctx, tube, "id", id)
		c.found(j, err)
	case opReserveTimeout:
		t, ok := readTimeout(cmd.rest)
		if !ok {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		return c.reserve(ctx, t)
	case opReserve:
		if c.exact(cmd) {
			return c.reserve(ctx, -1)
		}
	case opReserveJob:
		tube, id, ok := c.jobArg(ctx, cmd)
		if !ok {
			return nil
		}
		c.setWorker()
		j, err := c.s.store.ReserveJob(ctx, tube, id, c.token)
		if err != nil {
			c.internal("reserve-job", err)
		} else if j == nil {
			c.reply(msgNotFound)
		} else {
			c.reserved(tube, j)
		}
	case opDelete:
		c.byID(ctx, cmd, func(tube string, id uint64) (bool, error) {
			ok, err := c.s.store.Delete(ctx, tube, id, c.token)
			if ok {
				delete(c.held, id)
				c.s.deleted(ctx, id)
			}
			return ok, err
		}, msgDeleted)
	case opRelease:
		id, rest, ok1 := readUint(cmd.rest, 64)
		pri, rest, ok2 := readUint(rest, 32)
		delay, ok3 := readUintAll(rest, 32)
		if !ok1 || !ok2 || !ok3 {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		c.heldOp(ctx, id, msgReleased, func(tube string) (bool, error) {
			return c.s.store.Release(ctx, tube, id, c.token, uint32(pri), uint32(delay), true)
		})
	case opBury:
		id, rest, ok1 := readUint(cmd.rest, 64)
		pri, ok2 := readUintAll(rest, 32)
		if !ok1 || !ok2 {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		c.heldOp(ctx, id, msgBuried, func(tube string) (bool, error) {
			return c.s.store.Bury(ctx, tube, id, c.token, uint32(pri))
		})
	case opTouch:
		id, ok := readUintAll(cmd.rest, 64)
		if !ok {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		h := c.held[id]
		if h == nil {
			c.reply(msgNotFound)
			return nil
		}
		ttr, err := c.s.store.Touch(ctx, h.tube, id, c.token)
		switch {
		case err != nil:
			c.internal("touch", err)
		case ttr == 0:
			delete(c.held, id)
			c.reply(msgNotFound)
		default:
			h.deadline = time.Now().Add(time.Duration(ttr) * time.Second)
			c.reply(msgTouched)
		}
	case opKick:
		bound, ok := readKickBound(cmd.rest)
		if !ok {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		n, err := c.s.store.Kick(ctx, c.use, bound)
		if err != nil {
			c.internal("kick", err)
			return nil
		}
		c.reply("KICKED " + strconv.FormatUint(uint64(n), 10) + "\r\n")
	case opKickJob:
		c.byID(ctx, cmd, func(tube string, id uint64) (bool, error) {
			return c.s.store.KickJob(ctx, tube, id)
		}, msgKicked)
	case opStatsJob:
		tube, id, ok := c.jobArg(ctx, cmd)
		if !ok {
			return nil
		}
		st, err := c.s.store.StatsJob(ctx, tube, id)
		switch {
		case err != nil:
			c.internal("stats-job", err)
		case st == nil:
			c.reply(msgNotFound)
		default:
			c.data(fmtJobStats(id, tube, st))
		}
	case opStatsTube:
		if !validTube(cmd.rest) {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		c.statsTube(ctx, cmd.rest)
	case opStats:
		if c.exact(cmd) {
			c.stats(ctx)
		}
	case opListTubes:
		if c.exact(cmd) {
			tubes, err := c.s.existingTubes(ctx)
			if err != nil {
				c.internal("list-tubes", err)
				return nil
			}
			c.data(fmtList(tubes))
		}
	case opListTubeUsed:
		if c.exact(cmd) {
			c.reply("USING " + c.use + "\r\n")
		}
	case opListTubesWatched:
		if c.exact(cmd) {
			c.data(fmtList(c.watch))
		}
	case opUse:
		if !validTube(cmd.rest) {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		c.s.mu.Lock()
		c.s.ref(cmd.rest).using++
		c.s.ref(c.use).using--
		c.s.unref(c.use)
		c.s.mu.Unlock()
		c.use = cmd.rest
		c.reply("USING " + c.use + "\r\n")
	case opWatch:
		if !validTube(cmd.rest) {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		if !c.watching(cmd.rest) {
			c.watch = append(c.watch, cmd.rest)
			c.s.mu.Lock()
			c.s.ref(cmd.rest).watching++
			c.s.mu.Unlock()
		}
		c.reply("WATCHING " + strconv.Itoa(len(c.watch)) + "\r\n")
	case opIgnore:
		if !validTube(cmd.rest) {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		if c.watching(cmd.rest) {
			if len(c.watch) < 2 {
				c.reply(msgNotIgnored)
				return nil
			}
			for i, t := range c.watch {
				if t == cmd.rest {
					c.watch = append(c.watch[:i:i], c.watch[i+1:]...)
					break
				}
			}
			c.s.mu.Lock()
			c.s.ref(cmd.rest).watching--
			c.s.unref(cmd.rest)
			c.s.mu.Unlock()
		}
		c.reply("WATCHING " + strconv.Itoa(len(c.watch)) + "\r\n")
	case opQuit:
		_ = c.flush()
		return errClosed
	case opPauseTube:
		tube, delay, ok := readPauseArgs(cmd.rest)
		if !ok {
			c.reply(msgBadFormat)
			return nil
		}
		c.count(cmd.op)
		exists, err := c.s.tubeExists(ctx, tube)
		if err != nil {
			c.internal("pause-tube", err)
			return nil
		}
		if !exists {
			c.reply(msgNotFound)
			return nil
		}
		if err := c.s.store.Pause(ctx, tube, delay); err != nil {
			c.internal("pause-tube", err)
			return nil
		}
		c.reply(msgPaused)
	default:
		c.reply(msgUnknownCommand)
	}
	return nil
}

func (c *conn) watching(tube string) bool {
	for _, t := range c.watch {
		if t == tube {
			return true
		}
	}
	return false
}

func (c *conn) setWorker() {
	if !c.worker {
		c.worker = true
		c.s.mu.Lock()
		c.s.workers++
		c.s.mu.Unlock()
	}
}

// tubeOf returns the tube of job id; when there is none (or Redis fails) it
// has answered and returns false.
func (c *conn) tubeOf(ctx context.Context, id uint64) (string, bool) {
	if h := c.held[id]; h != nil {
		return h.tube, true
	}
	tube, err := c.s.store.TubeOf(ctx, id)
	if err != nil {
		c.internal("find a job's tube", err)
		return "", false
	}
	if tube == "" {
		c.reply(msgNotFound)
		return "", false
	}
	return tube, true
}

// jobArg reads the job ID that is a command's one argument, counts the
// command, and finds the job's tube; when it cannot (BAD_FORMAT, no such
// job, Redis failing) it has answered and returns false.
func (c *conn) jobArg(ctx context.Context, cmd command) (string, uint64, bool) {
	id, ok := readUintAll(cmd.rest, 64)
	if !ok {
		c.reply(msgBadFormat)
		return "", 0, false
	}
	c.count(cmd.op)
	tube, ok := c.tubeOf(ctx, id)
	return tube, id, ok
}

// byID runs a command of the form "<cmd> <id>": f answers whether it did it.
func (c *conn) byID(ctx context.Context, cmd command, f func(tube string, id uint64) (bool, error), done string) {
	tube, id, ok := c.jobArg(ctx, cmd)
	if !ok {
		return
	}
	did, err := f(tube, id)
	switch {
	case err != nil:
		c.internal(opNames[cmd.op], err)
	case did:
		c.reply(done)
	default:
		c.reply(msgNotFound)
	}
}

// heldOp runs release or bury on a job this connection holds.
func (c *conn) heldOp(ctx context.Context, id uint64, done string, f func(tube string) (bool, error)) {
	h := c.held[id]
	if h == nil {
		c.reply(msgNotFound)
		return
	}
	ok, err := f(h.tube)
	switch {
	case err != nil:
		c.internal("release or bury", err)
	case ok:
		delete(c.held, id)
		c.reply(done)
	default:
		delete(c.held, id) // its time to run ended: it is not ours any more
		c.reply(msgNotFound)
	}
}

// found answers a peek.
func (c *conn) found(j *Job, err error) {
	switch {
	case err != nil:
		c.internal("peek", err)
	case j == nil:
		c.reply(msgNotFound)
	default:
		c.job("FOUND", j)
	}
}

func (c *conn) job(word string, j *Job) {
	c.out.WriteString(word + " " + strconv.FormatUint(j.ID, 10) + " " + strconv.Itoa(len(j.Body)) + "\r\n")
	c.out.Write(j.Body)
	c.out.WriteString("\r\n")
}

// data answers OK with a YAML body.
func (c *conn) data(body string) {
	c.out.WriteString("OK " + strconv.Itoa(len(body)) + "\r\n" + body + "\r\n")
}

// reserved records job j of tube as held and answers RESERVED.
func (c *conn) reserved(tube string, j *Job) {
	c.held[j.ID] = &held{tube: tube, deadline: time.Now().Add(time.Duration(j.TTR) * time.Second)}
	c.job("RESERVED", j)
}

// put reads a put command's job and stores it.
func (c *conn) put(ctx context.Context, rest string) error {
	pri, rest, ok1 := readUint(rest, 32)
	delay, rest, ok2 := readUint(rest, 32)
	ttr, rest, ok3 := readUint(rest, 32)
	size, rest, ok4 := readUint(rest, 32)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		c.reply(msgBadFormat)
		return nil
	}
	c.count(opPut)
	if size > uint64(c.s.cfg.MaxJobSize) {
		if err := c.skipN(size + 2); err != nil {
			return err
		}
		c.reply(msgJobTooBig)
		return nil
	}
	if rest != "" {
		c.reply(msgBadFormat)
		return nil
	}
	if !c.producer {
		c.producer = true
		c.s.mu.Lock()
		c.s.producers++
		c.s.mu.Unlock()
	}
	body, err := c.readN(int(size) + 2)
	if err != nil {
		return err
	}
	if body[size] != '\r' || body[size+1] != '\n' {
		c.reply(msgExpectedCRLF)
		return nil
	}
	id, err := c.s.store.Put(ctx, c.use, uint32(pri), uint32(delay), uint32(max(ttr, 1)), body[:size])
	if err != nil {
		c.internal("put", err)
		return nil
	}
	c.reply("INSERTED " + strconv.FormatUint(id, 10) + "\r\n")
	return nil
}
