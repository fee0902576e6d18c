package expset

import (
	"strings"
	"testing"
	"time"
)

// TestCallToken: a token reads back what it was made of, at the extremes;
// two made at one instant differ; it holds no space (the attempts field
// splits on spaces: groups.lua); tokens of another form do not read.
func TestCallToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		consumer string
		start    time.Time
		lease    time.Duration
		slot     bool
	}{
		{"c", time.UnixMilli(0), time.Millisecond, false},
		{"", time.UnixMilli(1<<53 - 1), 24 * time.Hour, true},
		{strings.Repeat("\xff", maxConsumerLen), time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC), 30 * time.Second, true},
	} {
		tok := callToken(c.consumer, c.start, c.lease, c.slot)
		ti, ok := parseCallToken(tok)
		if !ok || !ti.start.Equal(c.start) || ti.lease != c.lease || ti.consumer != consumerHash(c.consumer) || ti.slot != c.slot {
			t.Errorf("token %q of %+v reads %+v %v", tok, c, ti, ok)
		}
		if strings.ContainsAny(tok, " \t\n") || len(tok) > 48 {
			t.Errorf("token %q: want no space, at most 48 bytes", tok)
		}
		if again := callToken(c.consumer, c.start, c.lease, c.slot); again == tok {
			t.Errorf("two tokens made alike: both %q", tok)
		}
	}
	for _, tok := range []string{"", "2hb9q1x8c3j7", "a.b.c.d.e", "1.2.3.2.4", "1.2.zzzzzzzzzz.1.4", "1.2.3.1", "1.2.3.1.4.5"} {
		if ti, ok := parseCallToken(tok); ok {
			t.Errorf("token %q reads %+v, want not a token of this form", tok, ti)
		}
	}
}
