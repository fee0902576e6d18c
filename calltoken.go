package expset

import (
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// A handler call's token makes a lease the call's (see leases.go and
// groups.lua: the event's attempts field carries the token of the last call
// begun). It also carries what Set.Running shows of the call, so that no
// script of the hot path writes more: "<start>.<lease>.<consumer>.<slot>.<random>",
// each part in base 36 but slot:
//
//	start     when the call began, Unix ms by its Set's WithClock, else
//	          by the consumer's machine
//	lease     the consumer's lease TTL in ms (WithLeaseTTL)
//	consumer  the FNV-1a hash (32 bits) of the consumer's name: an event
//	          pending under another consumer (it claimed the event and has
//	          not begun it) has no call under way
//	slot      "1" when the begin asked for an owner slot (WithOwnerConcurrency),
//	          else "0": such a call whose attempts field no longer names the
//	          slot has ended or lapsed
//	random    32 random bits: with the rest, tokens are unique
//
// "kx3v1a8w.1jk.1f0xq9k.0.2hb9q1x8c3j7" is 35 bytes or so. A token of
// another form (a client before this one: the random part alone) reads as a
// call whose start and lease are unknown.

// callToken returns the token of a handler call consumer begins at start
// with lease TTL lease, asking for an owner slot when slot.
func callToken(consumer string, start time.Time, lease time.Duration, slot bool) string {
	s := "0"
	if slot {
		s = "1"
	}
	return strconv.FormatInt(start.UnixMilli(), 36) + "." + strconv.FormatInt(lease.Milliseconds(), 36) + "." +
		strconv.FormatUint(uint64(consumerHash(consumer)), 36) + "." + s + "." + strconv.FormatUint(uint64(rand.Uint32()), 36)
}

// tokenInfo is what a call's token says of it (callToken).
type tokenInfo struct {
	start    time.Time
	lease    time.Duration
	consumer uint32
	slot     bool
}

// parseCallToken reads tok, made by callToken; ok is false for a token of
// another form.
func parseCallToken(tok string) (ti tokenInfo, ok bool) {
	p := strings.Split(tok, ".")
	if len(p) != 5 || (p[3] != "0" && p[3] != "1") {
		return ti, false
	}
	start, err1 := strconv.ParseInt(p[0], 36, 64)
	lease, err2 := strconv.ParseInt(p[1], 36, 64)
	h, err3 := strconv.ParseUint(p[2], 36, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return ti, false
	}
	return tokenInfo{start: time.UnixMilli(start), lease: time.Duration(lease) * time.Millisecond, consumer: uint32(h), slot: p[3] == "1"}, true
}

// consumerHash is the hash of consumer's name a call's token carries.
func consumerHash(consumer string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(consumer))
	return h.Sum32()
}
