package beanstalk

import (
	"strings"
)

// Limits of the protocol, as beanstalkd 1.12 has them.
const (
	// lineMax is the longest command line, "\r\n" included; a longer one is
	// discarded up to its end and answered BAD_FORMAT.
	lineMax = 224
	// nameMax is the longest tube name.
	nameMax = 200
	// DefaultMaxJobSize is the largest job body by default (-z).
	DefaultMaxJobSize = 65535
	// MaxMaxJobSize is the largest -z beanstalkd accepts.
	MaxMaxJobSize = 1 << 30
)

// Replies without arguments.
const (
	msgNotFound       = "NOT_FOUND\r\n"
	msgDeadlineSoon   = "DEADLINE_SOON\r\n"
	msgTimedOut       = "TIMED_OUT\r\n"
	msgDeleted        = "DELETED\r\n"
	msgReleased       = "RELEASED\r\n"
	msgBuried         = "BURIED\r\n"
	msgKicked         = "KICKED\r\n"
	msgTouched        = "TOUCHED\r\n"
	msgNotIgnored     = "NOT_IGNORED\r\n"
	msgPaused         = "PAUSED\r\n"
	msgInternalError  = "INTERNAL_ERROR\r\n"
	msgBadFormat      = "BAD_FORMAT\r\n"
	msgUnknownCommand = "UNKNOWN_COMMAND\r\n"
	msgExpectedCRLF   = "EXPECTED_CRLF\r\n"
	msgJobTooBig      = "JOB_TOO_BIG\r\n"
)

// op is a command.
type op int

const (
	opUnknown op = iota
	opPut
	opPeekJob
	opPeekReady
	opPeekDelayed
	opPeekBuried
	opReserveTimeout
	opReserveJob
	opReserve
	opDelete
	opRelease
	opBury
	opKick
	opKickJob
	opTouch
	opStatsJob
	opStatsTube
	opStats
	opUse
	opWatch
	opIgnore
	opListTubesWatched
	opListTubeUsed
	opListTubes
	opQuit
	opPauseTube
	numOps
)

// commands are the command prefixes in the order beanstalkd tries them: a
// line is the first command it starts with ("reserve-job" without its space
// is a reserve with trailing garbage, "quitx" a quit).
var commands = []struct {
	prefix string
	op     op
}{
	{"put ", opPut},
	{"peek ", opPeekJob},
	{"peek-ready", opPeekReady},
	{"peek-delayed", opPeekDelayed},
	{"peek-buried", opPeekBuried},
	{"reserve-with-timeout ", opReserveTimeout},
	{"reserve-job ", opReserveJob},
	{"reserve", opReserve},
	{"delete ", opDelete},
	{"release ", opRelease},
	{"bury ", opBury},
	{"kick ", opKick},
	{"kick-job ", opKickJob},
	{"touch ", opTouch},
	{"stats-job ", opStatsJob},
	{"stats-tube ", opStatsTube},
	{"stats", opStats},
	{"use ", opUse},
	{"watch ", opWatch},
	{"ignore ", opIgnore},
	{"list-tubes-watched", opListTubesWatched},
	{"list-tube-used", opListTubeUsed},
	{"list-tubes", opListTubes},
	{"quit", opQuit},
	{"pause-tube", opPauseTube},
}

// opNames are the names the stats command counts commands under.
var opNames = [numOps]string{
	opPut: "put", opPeekJob: "peek", opPeekReady: "peek-ready", opPeekDelayed: "peek-delayed",
	opPeekBuried: "peek-buried", opReserve: "reserve", opReserveTimeout: "reserve-with-timeout",
	opDelete: "delete", opRelease: "release", opUse: "use", opWatch: "watch", opIgnore: "ignore",
	opBury: "bury", opKick: "kick", opTouch: "touch", opStats: "stats", opStatsJob: "stats-job",
	opStatsTube: "stats-tube", opListTubes: "list-tubes", opListTubeUsed: "list-tube-used",
	opListTubesWatched: "list-tubes-watched", opPauseTube: "pause-tube",
}

// command is a parsed command line: the op and the text after its prefix.
type command struct {
	op   op
	rest string
}

// parseLine finds the command of a line (without its "\r\n").
func parseLine(line string) command {
	for _, c := range commands {
		if strings.HasPrefix(line, c.prefix) {
			return command{op: c.op, rest: line[len(c.prefix):]}
		}
	}
	return command{op: opUnknown}
}

// readUint reads a decimal unsigned integer the way beanstalkd does: spaces
// before it are skipped, then a digit must come, and the value must fit in
// bits. It returns the value and the text after it.
func readUint(s string, bits uint) (uint64, string, bool) {
	s = strings.TrimLeft(s, " ")
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, s, false
	}
	var v uint64
	i := 0
	limit := uint64(1)<<bits - 1
	if bits == 64 {
		limit = ^uint64(0)
	}
	overflow := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if v > (^uint64(0)-d)/10 {
			overflow = true
		}
		v = v*10 + d
	}
	if overflow || v > limit {
		return 0, s[i:], false
	}
	return v, s[i:], true
}

// readUintAll is readUint where nothing may follow the number.
func readUintAll(s string, bits uint) (uint64, bool) {
	v, rest, ok := readUint(s, bits)
	return v, ok && rest == ""
}

// isSpace is C's isspace.
func isSpace(b byte) bool {
	return b == ' ' || (b >= '\t' && b <= '\r')
}

// cNumber reads an integer as C's strtol and strtoul do: white space and a
// sign may come first and anything may follow the digits. It returns the
// sign, the magnitude, whether there was a digit, and whether the magnitude
// overflowed 64 bits.
func cNumber(s string) (neg bool, v uint64, digits, overflow bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if v > (^uint64(0)-d)/10 {
			overflow = true
		}
		v = v*10 + d
	}
	return neg, v, i > start, overflow
}

// readKickBound reads kick's bound as beanstalkd 1.12 does (strtoul, then
// truncated to 32 bits): no digit, or a value beyond 64 bits, is BAD_FORMAT;
// "-1" is 2^32-1.
func readKickBound(s string) (uint32, bool) {
	neg, v, digits, overflow := cNumber(s)
	if !digits || overflow {
		return 0, false
	}
	if neg {
		v = -v
	}
	return uint32(v), true
}

// readTimeout reads reserve-with-timeout's seconds as beanstalkd 1.12 does
// (strtol into an int): only a value beyond 64 bits is BAD_FORMAT; no digit
// means 0; the value is truncated to 32 bits, and a negative one means no
// timeout (returned as -1).
func readTimeout(s string) (int64, bool) {
	neg, v, _, overflow := cNumber(s)
	if overflow || (!neg && v > 1<<63-1) || (neg && v > 1<<63) {
		return 0, false
	}
	if neg {
		v = -v
	}
	t := int64(int32(uint32(v)))
	if t < 0 {
		t = -1
	}
	return t, true
}

// nameChars are the bytes a tube name may hold.
const nameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"

func isNameChar(b byte) bool { return strings.IndexByte(nameChars, b) >= 0 }

// validTube reports whether name is a tube name: 1 to 200 name characters,
// not starting with a hyphen.
func validTube(name string) bool {
	if len(name) == 0 || len(name) > nameMax || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isNameChar(name[i]) {
			return false
		}
	}
	return true
}

// readPauseArgs reads pause-tube's "<tube> <delay>" as beanstalkd does: the
// name starts after any spaces and runs while the bytes are name
// characters; the delay must end the line.
func readPauseArgs(s string) (string, uint32, bool) {
	s = strings.TrimLeft(s, " ")
	n := 0
	for n < len(s) && isNameChar(s[n]) {
		n++
	}
	if n == 0 {
		return "", 0, false
	}
	d, ok := readUintAll(s[n:], 32)
	if !ok || !validTube(s[:n]) {
		return "", 0, false
	}
	return s[:n], uint32(d), true
}
