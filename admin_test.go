package expset

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestReadConfigurationAndDrop(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(4), WithPayloads())
		other, _ := newTestSet(t, b)
		cfg := must[Configuration](t)(ReadConfiguration(ctx, b.rdb, s.Name()))
		if cfg != (Configuration{Shards: 4, Payloads: true}) {
			t.Fatalf("configuration %+v", cfg)
		}
		if _, err := ReadConfiguration(ctx, b.rdb, "never-opened"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("configuration of an unknown set: %v", err)
		}
		if _, err := ReadConfiguration(ctx, b.rdb, "bad{name}"); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
		for _, o := range []string{"a", "b", "c", "d", "e"} {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Hour, WithPayload([]byte("p"))))
			must[time.Time](t)(other.Add(ctx, o, "m", time.Hour))
		}
		otherBefore := snapshot(t, b.rdb, other.Name())
		n := must[int](t)(Drop(ctx, b.rdb, s.Name()))
		if n < 11 { // 5 owners + 5 payloads + index(es) + meta
			t.Fatalf("Drop deleted %d keys", n)
		}
		if keys := setKeys(t, b.rdb, s.Name()); len(keys) != 0 {
			t.Fatalf("keys left after Drop: %v", keys)
		}
		if after := snapshot(t, b.rdb, other.Name()); len(after) != len(otherBefore) {
			t.Fatalf("Drop touched another set: %d keys before, %d after", len(otherBefore), len(after))
		}
		if n := must[int](t)(Drop(ctx, b.rdb, s.Name())); n != 0 {
			t.Fatalf("second Drop deleted %d", n)
		}
	})
}
