package expset

import (
	"fmt"
	"strconv"
	"time"
)

// Script replies are checked here: a reply of the wrong shape is an
// ErrUnexpectedReply error naming the script, never a panic.

func unexpected(script string, v any) error {
	return fmt.Errorf("%w from %s: %T %v", ErrUnexpectedReply, script, v, v)
}

// asInt64 reads an integer reply, or an exact integer given as a string (a
// score as Redis formats it).
func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n, true
		}
		f, err := strconv.ParseFloat(x, 64)
		if err != nil || f != float64(int64(f)) {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

func asString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// parseMembers reads a flat member, deadline, member, deadline... list.
func parseMembers(script string, v any) ([]Member, error) {
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return nil, unexpected(script, v)
	}
	out := make([]Member, 0, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		id, ok1 := asString(xs[i])
		ms, ok2 := asInt64(xs[i+1])
		if !ok1 || !ok2 {
			return nil, unexpected(script, v)
		}
		out = append(out, Member{ID: id, Deadline: msTime(ms)})
	}
	return out, nil
}
