package store

import (
	"cmp"
	"errors"
	"fmt"
	"testing"
	"time"
)

// readers are every reply reader of the package, each made to take a
// reply alone.
var readers = map[string]func(v any) error{
	"add.lua":      func(v any) error { _, err := readAdd(v); return err },
	"remove.lua":   func(v any) error { _, _, err := readRemove(v, 3); return err },
	"deadline.lua": func(v any) error { _, _, err := readDeadline("deadline.lua", v); return err },
	"count.lua":    func(v any) error { _, err := readCount(v); return err },
	"members.lua":  func(v any) error { _, err := readMembers(v); return err },
	"payload.lua":  func(v any) error { _, _, err := readPayload(v); return err },
	"acquire.lua":  func(v any) error { _, err := readDecision(v, 3); return err },
	"acquire.lua (waiter)": func(v any) error {
		_, _, err := readQueued(v)
		return err
	},
	"acquire_many.lua": func(v any) error {
		s := New(nil, "t", Options{Shards: 1})
		reqs := []Acquire{{Owner: "o", Member: "a", Limit: 1}, {Owner: "o", Member: "b", Limit: 1}}
		var first error // a request's own error
		_, err := s.readMany(&Call{Reply: v}, reqs, []int{0, 1}, func(_ int, _ Decision, err error) {
			if first == nil {
				first = err
			}
		})
		if err == nil {
			err = first
		}
		return err
	},
	"wait_renew.lua": func(v any) error { _, err := readWaitRenew(v); return err },
	"put.lua":        func(v any) error { _, _, err := readPut(v); return err },
	"put_now.lua":    func(v any) error { _, _, err := readPutNow(v); return err },
	"reschedule.lua": func(v any) error { _, _, err := readReschedule(v); return err },
	"cancel_waiting.lua": func(v any) error {
		_, err := readCancelWaiting(v)
		return err
	},
	"cancel.lua":       func(v any) error { _, _, _, err := readCancel(v); return err },
	"job.lua":          func(v any) error { _, _, _, err := readJob(v); return err },
	"schedule.lua":     func(v any) error { _, _, err := readSchedule(v); return err },
	"sweep.lua":        func(v any) error { _, err := readSweep(v); return err },
	"kick.lua":         func(v any) error { _, err := readKick(v); return err },
	"remove_group.lua": func(v any) error { _, err := readRemoveGroup(v); return err },
	"running.lua":      func(v any) error { _, _, _, err := readRunning(0, v, map[string]BegunEvent{}); return err },
	"sweepers.lua":     func(v any) error { _, err := readSweepers(v, "t"); return err },
	"open.lua":         func(v any) error { _, err := readOpen("k", v); return err },
	"deadscan.lua":     func(v any) error { _, err := readDeadScan(v); return err },
	"begins.lua": func(v any) error {
		bs, err := ReadBegins(&Call{Reply: v}, 2)
		for _, b := range bs {
			err = cmp.Or(err, b.Err)
		}
		return err
	},
	"begin_fresh.lua": func(v any) error {
		bs, err := ReadBegins(&Call{Script: scriptBeginFresh, Reply: v}, 1)
		for _, b := range bs {
			err = cmp.Or(err, b.Err)
		}
		return err
	},

	"ack.lua":   func(v any) error { _, err := ReadAck(&Call{Reply: v}, 2); return err },
	"renew.lua": func(v any) error { _, err := ReadRenew(&Call{Reply: v}, 2); return err },
	"claim.lua": func(v any) error { c, err := readClaim(v); return cmp.Or(err, c.Malformed) },
}

// errReply is a Redis error in a reply (acquire_many.lua's, per request).
var errReply = errors.New("ERR x")

// shapes are replies of every shape Redis can give a script, well formed
// for some reader or not.
var shapes = []any{
	nil, "", "x", "12", "1.5", "-3", int64(0), int64(1), int64(2), int64(3), int64(-1), int64(-2), int64(1 << 62),
	1.5, true, errReply,
	[]any{}, []any{nil}, []any{"x"}, []any{int64(1)}, []any{int64(4)}, []any{int64(4), "c"}, []any{int64(4), int64(9)},
	[]any{"a", "b"}, []any{"a", int64(5)}, []any{int64(1), int64(5)}, []any{int64(1), "x"}, []any{int64(2), int64(5), "x"},
	[]any{int64(3), int64(0), int64(1), int64(5)}, []any{int64(3), int64(0), int64(-1), int64(5)},
	[]any{int64(1), int64(1), int64(5), int64(0), "ev"}, []any{int64(1), int64(1), int64(5), int64(0), int64(9)},
	[]any{int64(1), int64(2), int64(3), int64(4), int64(5), "x"}, []any{int64(1), int64(2), int64(3), int64(4), "x", int64(1)},
	[]any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8)},
	[]any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), "o", []any{"s", int64(1), int64(2), "c"}},
	[]any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), []any{"s", int64(1)}},
	[]any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), int64(9)},
	[]any{int64(1), int64(2), "g", "o"}, []any{int64(1), int64(-1), "g", "o", int64(2)}, []any{int64(1), int64(-1), "g", "o", "n"},
	[]any{int64(5), int64(0), "tok", int64(9)}, []any{int64(5), int64(0), "tok"}, []any{int64(5), int64(0), int64(1), int64(9)},
	[]any{"version", "1", "shards", "4", "events", "0", "payloads", "0", "index", "0"},
	[]any{"version", "1", "shards", "0", "events", "0", "payloads", "0", "index", "0"},
	[]any{"version", int64(1)}, []any{nil, nil, nil, nil, nil, nil, nil, nil, nil},
	[]any{[]any{}}, []any{errReply}, []any{int64(1), errReply},
	[]any{[]any{int64(1), int64(1), int64(0)}, int64(0)}, []any{[]any{int64(1), int64(0)}, int64(-2)},
	[]any{[]any{"1-0", []any{"o", "u"}, int64(1), int64(0)}}, []any{[]any{"1-0", []any{"o"}, int64(1), int64(0)}},
	[]any{[]any{"1-0", []any{"o", "u"}, int64(-3), int64(0)}, []any{"2-0", "x", int64(0), int64(0)}},
	[]any{"0-0", []any{"1-0", int64(1), int64(0), []any{"o", "u"}}}, []any{"0-0", []any{"1-0", int64(1), int64(0)}},
	map[any]any{"a": "b"},
}

// TestReadersNeverPanic feeds every reader every shape: it answers or
// fails, and a failure is ErrUnexpectedReply (or the Redis error the reply
// carries).
func TestReadersNeverPanic(t *testing.T) {
	t.Parallel()
	for name, read := range readers {
		for _, v := range shapes {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s on %#v: panic %v", name, v, r)
					}
				}()
				if err := read(v); err != nil && !errors.Is(err, ErrUnexpectedReply) && !errors.Is(err, errReply) {
					t.Errorf("%s on %#v: %v, not ErrUnexpectedReply", name, v, err)
				}
			}()
		}
	}
}

// TestReadersRefuseMalformed checks that each reader fails on replies its
// script never gives, with an error naming the script.
func TestReadersRefuseMalformed(t *testing.T) {
	t.Parallel()
	bad := map[string][]any{
		"add.lua":      {nil, "x", []any{}},
		"remove.lua":   {nil, int64(1), []any{int64(1)}, []any{int64(1), int64(0)}, []any{int64(1), int64(4)}, []any{"x", int64(1)}},
		"deadline.lua": {"x", []any{}},
		"count.lua":    {nil, "1.5", []any{}},
		"members.lua":  {nil, "x", []any{"a"}, []any{"a", "notanumber"}, []any{int64(1), "1"}, []any{"a", "1.5"}},
		"payload.lua":  {"x", []any{}, []any{int64(1), int64(2), int64(3)}, []any{int64(1), int64(2)}},
		"acquire.lua": {nil, "x", int64(3), int64(-1), int64(1<<8 + 3), int64(5<<8 + 1), []any{}, []any{int64(1)}, []any{"a", "b", "c", "d"}, []any{int64(7), int64(1), int64(1), int64(0)}, []any{int64(1), int64(1), int64(1), int64(0), int64(5)},
			int64(64<<2 + 3), int64(5<<22 + 63<<2 + 3), "", "1 2", "x 1 2", "1 2 x", "4 100 5", "1 0 5", "1 70 0", "-1 70 5",
			"1 2 9 ", "1 2 9 x", "1 2 9 7", "1 2 9 7 ", "1 2 9 7 x", "1 2 9 7 3:ab", "1 2 9 7 0:", "1 2 9 7 1:a ", "1 2 9 7 1:ab", "0 2 9 7 1:a", "1 2 9 -7 1:a"},
		"acquire.lua (waiter)": {[]any{int64(3), int64(0), int64(-1), int64(5)}, []any{int64(3), int64(0), "x", int64(5)}},
		"acquire_many.lua":     {nil, []any{}, []any{int64(1), int64(1), int64(1)}, []any{"x"}},
		"wait_renew.lua":       {nil, "x", []any{}},
		"put.lua":              {nil, "x", []any{}},
		"put_now.lua":          {nil, "x", []any{}},
		"reschedule.lua":       {"x", []any{}},
		"cancel_waiting.lua":   {nil, int64(3), int64(-1), "1"},
		"cancel.lua":           {nil, []any{}, []any{"x"}, []any{int64(3)}, []any{int64(4)}, []any{int64(4), int64(1)}, []any{int64(1), int64(2)}},
		"job.lua":              {nil, []any{}, []any{"x"}, []any{int64(1)}, []any{int64(2), int64(5)}, []any{int64(2), int64(5), "x"}, []any{int64(5)}, []any{int64(4), int64(1)}},
		"schedule.lua":         {nil, int64(1), []any{int64(1)}, []any{"x", int64(0)}},
		"sweep.lua":            {nil, []any{int64(1)}, []any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), "x"}, []any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), int64(9)}, []any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), []any{"s"}}},
		"kick.lua":             {nil, "x", []any{}},
		"remove_group.lua":     {nil, []any{}, []any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6)}},
		"running.lua": {nil, []any{}, []any{int64(1), "0"}, []any{int64(1), "0", "x"}, []any{"x", "0", int64(0)}, []any{int64(1), "0", int64(0), "g"},
			[]any{int64(1), "0", int64(0), "g", "1-0", "c", int64(0), int64(1), "1", "o", "m"},
			[]any{int64(1), "0", int64(0), "g", "1-0", "c", int64(0), int64(1), "x t", "o", "m"},
			[]any{int64(1), "0", int64(0), "g", "1-0", "c", int64(0), int64(1), "1 t 5", "o", "m"},
			[]any{int64(1), "0", int64(0), "g", "1-0", "c", "x", int64(1), "1 t", "o", "m"}},
		"sweepers.lua":    {nil, []any{}, []any{int64(1)}, []any{"x", int64(0)}, []any{int64(1), int64(0), "t"}, []any{int64(1), int64(0), int64(2), int64(3)}},
		"deadscan.lua":    {nil, []any{"", int64(0), int64(0)}, []any{"", int64(1), int64(1), []any{"x"}}, []any{"", int64(1), int64(1), []any{[]any{"1-0", []any{"a"}}}}, []any{int64(1), int64(1), int64(1), []any{}}},
		"begins.lua":      {nil, "x", int64(0), []any{}, []any{int64(0)}, []any{int64(1), int64(0)}, []any{"x", int64(0)}, []any{[]any{int64(1)}, int64(0)}, []any{[]any{int64(0), int64(1), int64(0)}, int64(0)}, []any{[]any{int64(1), "x", int64(0)}, int64(0)}, []any{int64(-5), int64(0)}, []any{int64(3), int64(0)}},
		"begin_fresh.lua": {nil, "x", int64(-5), int64(3), []any{}, []any{int64(4), int64(4)}, []any{"x"}},
		"ack.lua":         {nil, "x", int64(1), []any{}, []any{int64(1)}, []any{int64(1), int64(1), int64(1)}},
		"renew.lua":       {nil, "x", int64(1), []any{}, []any{int64(1)}},
		"claim.lua":       {nil, "x", []any{}, []any{int64(1)}, []any{"0-0", "x"}, []any{"0-0", []any{"1-0", int64(1), int64(0)}}, []any{"0-0", []any{"1-0", "x", int64(0), []any{}}}, []any{"0-0", []any{"1-0", int64(1), int64(0), []any{"a"}}}},
		"open.lua":        {nil, []any{"a"}, []any{"version", int64(1)}, []any{"version", "1"}, []any{"version", "1", "shards", "0", "events", "0", "payloads", "0", "index", "0"}},
	}
	for name, vs := range bad {
		read := readers[name]
		if read == nil {
			t.Fatalf("no reader %s", name)
		}
		for _, v := range vs {
			if err := read(v); !errors.Is(err, ErrUnexpectedReply) {
				t.Errorf("%s on %#v: %v, want ErrUnexpectedReply", name, v, err)
			}
		}
	}
	if len(bad) != len(readers) {
		t.Errorf("%d readers, %d with malformed replies tested", len(readers), len(bad))
	}
}

// TestReadersRead checks a well-formed reply of each kind the scripts give.
func TestReadersRead(t *testing.T) {
	t.Parallel()
	check := func(what string, ok bool, got ...any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: %v", what, fmt.Sprint(got...))
		}
	}
	d, err := readDecision(int64(1700000000123<<8+2<<2+2), 3)
	check("acquire.lua packed admission", err == nil && d.Allowed && d.Existing && d.Count == 2 && d.Limit == 3 && d.Deadline.UnixMilli() == 1700000000123, d, err)
	d, err = readDecision(int64(1500<<8+3<<2), 3)
	check("acquire.lua packed denial", err == nil && !d.Allowed && d.Count == 3 && d.RetryAfter == 1500*time.Millisecond, d, err)
	d, err = readDecision(int64(1500<<22+100<<2+3), 100)
	check("acquire_plain.lua denial of a count of 64 or more", err == nil && !d.Allowed && d.Count == 100 && d.RetryAfter == 1500*time.Millisecond, d, err)
	d, err = readDecision("2 5000 1700000000123", 10000)
	check("acquire_plain.lua text", err == nil && d.Allowed && d.Existing && d.Count == 5000 && d.Deadline.UnixMilli() == 1700000000123, d, err)
	d, err = readDecision("1 3 1700000000123 1700000060123 5:a b:c 2:\x00 ", 3)
	check("acquire_plain.lua text after an eviction", err == nil && d.Allowed && !d.Existing && d.Count == 3 && d.Deadline.UnixMilli() == 1700000000123 &&
		len(d.Evicted) == 2 && d.Evicted[0] == "a b:c" && d.Evicted[1] == "\x00 ", d, err)
	d, err = readDecision("2 1 9 99 1:x", 1)
	check("acquire_plain.lua text of a retry with its receipt", err == nil && d.Existing && len(d.Evicted) == 1 && d.Evicted[0] == "x", d, err)
	d, err = readDecision([]any{int64(1), int64(3), int64(9), int64(0), "e1", "e2"}, 3)
	check("acquire.lua table", err == nil && d.Allowed && len(d.Evicted) == 2 && d.Deadline.UnixMilli() == 9, d, err)
	ms, err := readMembers([]any{"a", "1700000000123", "b", int64(5)})
	check("members.lua", err == nil && len(ms) == 2 && ms[0].Deadline.UnixMilli() == 1700000000123, ms, err)
	p, found, err := readPayload([]any{int64(5), "pay"})
	check("payload.lua", err == nil && found && string(p) == "pay", p, found, err)
	due, put, err := readPut(int64(2*77 + 1))
	check("put.lua", err == nil && put && due.UnixMilli() == 77, due, put, err)
	due, put, err = readPutNow(int64(2 * 78))
	check("put_now.lua", err == nil && !put && due.UnixMilli() == 78, due, put, err)
	js, cursor, more, err := readJob([]any{int64(4), "ev 1-0"})
	check("job.lua cursor", err == nil && more && cursor == "ev 1-0" && js == JobState{}, js, cursor, err)
	js, _, more, err = readJob([]any{int64(2), int64(9), int64(3)})
	check("job.lua running", err == nil && !more && js.State == "running" && js.Attempt == 3, js, err)
	sw, err := readSweep([]any{int64(10), int64(2), int64(6), int64(4), int64(1), int64(0), int64(-1), int64(0), "o", []any{"s", int64(1), int64(2), "c"}})
	check("sweep.lua", err == nil && sw.Expired == 2 && len(sw.Due) == 1 && len(sw.Refills) == 1 && sw.Refills[0].Gen == "1", sw, err)
	reg, err := readSweepers([]any{int64(5), int64(1), "b", int64(9), "a", int64(7)}, "a")
	check("sweepers.lua", err == nil && reg.Joined && reg.Tokens[0] == "a" && reg.First == 9, reg, err)
	c, err := readOpen("k", []any{"version", "1", "shards", "4", "events", "1", "payloads", "0", "index", "1"})
	check("open.lua", err == nil && c == Config{Shards: 4, Events: true, Index: true}, c, err)
}
