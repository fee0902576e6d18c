package expset

import "fmt"

// Reason says why a member left its set and produced an event: it reached
// its deadline, or a quota with WithEvictOldest evicted it to make room.
type Reason uint8

// The reasons an event can carry. The zero Reason is ReasonExpired.
const (
	ReasonExpired Reason = iota // the member reached its deadline
	ReasonEvicted               // WithEvictOldest evicted it before its deadline
)

// String returns "expired" or "evicted".
func (r Reason) String() string {
	switch r {
	case ReasonExpired:
		return "expired"
	case ReasonEvicted:
		return "evicted"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// parseReason reads an event entry's r field: absent for an expiry,
// "evicted" for an eviction.
func parseReason(v any) (Reason, bool) {
	switch v {
	case nil:
		return ReasonExpired, true
	case "evicted":
		return ReasonEvicted, true
	}
	return 0, false
}
