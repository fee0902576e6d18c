package store

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrUnexpectedReply means Redis answered a script or a read with a reply of
// the wrong shape: a bug, or a key written by something else. Every reader
// of this package returns an error wrapping it for such a reply, never a
// panic.
var ErrUnexpectedReply = errors.New("expset: unexpected reply")

// Unexpected is the error of a reply v of the wrong shape from script.
func Unexpected(script string, v any) error {
	return fmt.Errorf("%w from %s: %T %v", ErrUnexpectedReply, script, v, v)
}

// Int64 reads an integer reply, or an exact integer given as a string (a
// score as Redis formats it).
func Int64(v any) (int64, bool) {
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

// String reads a string reply.
func String(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

// msTime is the instant ms milliseconds after the Unix epoch.
func msTime(ms int64) time.Time { return time.UnixMilli(ms) }
