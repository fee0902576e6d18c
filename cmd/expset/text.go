package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/expset/expset"
)

// printable quotes a string that holds spaces, quotes, control characters
// or bytes that are not UTF-8 (as Go's %q does: "\xff"), so a column stays
// one column and the exact bytes can be read back.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' }) >= 0 {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// plural returns one when n is 1, else many: the noun after a count, as
// in "1 call" and "0 calls". The web page's templates call it too.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ownerText is the OWNER column of an event: its owner, or "(job)" and
// "(schedule)" for the jobs of Set.Put and the ticks of schedules, whose
// IDs are in the MEMBER column.
func ownerText(e expset.Expiry) string {
	switch {
	case e.Owner != "":
		return printable(e.Owner)
	case e.Tick:
		return "(schedule)"
	}
	return "(job)"
}

// exact returns s in standard base64 when s is not valid UTF-8, else "".
// JSON strings hold text only (encoding/json turns a stray byte into
// U+FFFD), so beside each text field that can hold arbitrary bytes --json
// prints a FIELD_base64 holding the exact bytes whenever they are not UTF-8.
func exact(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// openExisting opens the set name recorded in Redis, telling a set that is
// not there apart from other failures (the library's ErrNotFound says
// "member not found", which is not what happened). An operator inspects a
// set also on a server that evicts keys (WithEvictingServer): stats says
// how many it evicted.
func openExisting(ctx context.Context, c *conn, name string, opts ...expset.OpenOption) (*expset.Set, error) {
	set, err := expset.Open(ctx, c.rdb, name, append(opts, expset.WithRecordedConfiguration(), expset.WithEvictingServer())...)
	return set, noSet(err, name, c)
}

// openSet connects to Redis and opens the set name recorded there
// (openExisting); the caller closes the connection it returns.
func (a *app) openSet(ctx context.Context, name string) (*conn, *expset.Set, error) {
	c, err := a.connect(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	set, err := openExisting(ctx, c, name)
	if err != nil {
		c.close()
		return nil, nil, err
	}
	return c, set, nil
}

// noSet rewrites an ErrNotFound from opening or reading the configuration of
// set name into a message that says what to check.
func noSet(err error, name string, c *conn) error {
	if err == nil || !errors.Is(err, expset.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: no set %q in %s (no configuration recorded): check NAME (names are case-sensitive) and --redis; a set exists once an application has opened it",
		errNotFound, name, c.desc)
}
