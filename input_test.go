package expset

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBadInput checks that every public call rejects bad input with its
// sentinel error and writes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 3))
		must[time.Time](t)(s.Add(ctx, "u", "m", time.Minute)) // some state to keep
		huge := strings.Repeat("x", 1<<20)
		before := snapshot(t, b.rdb, s.Name())

		cases := []struct {
			name string
			call func() error
			want error
		}{
			{"Add empty owner", func() error { _, err := s.Add(ctx, "", "m", time.Second); return err }, ErrInvalidArgument},
			{"Add huge owner", func() error { _, err := s.Add(ctx, huge, "m", time.Second); return err }, ErrInvalidArgument},
			{"Add empty member", func() error { _, err := s.Add(ctx, "u", "", time.Second); return err }, ErrInvalidArgument},
			{"Add huge member", func() error { _, err := s.Add(ctx, "u", huge, time.Second); return err }, ErrInvalidArgument},
			{"Add zero ttl", func() error { _, err := s.Add(ctx, "u", "n", 0); return err }, ErrInvalidArgument},
			{"Add negative ttl", func() error { _, err := s.Add(ctx, "u", "n", -time.Second); return err }, ErrInvalidArgument},
			{"Add sub-ms ttl", func() error { _, err := s.Add(ctx, "u", "n", 999*time.Microsecond); return err }, ErrInvalidArgument},
			{"Add ttl past maxTTL", func() error { _, err := s.Add(ctx, "u", "n", maxTTL+time.Millisecond); return err }, ErrInvalidArgument},
			{"Add payload without WithPayloadStorage", func() error { _, err := s.Add(ctx, "u", "n", time.Second, WithPayload([]byte("x"))); return err }, ErrInvalidArgument},
			{"Remove empty owner", func() error { _, err := s.Remove(ctx, "", "m"); return err }, ErrInvalidArgument},
			{"Remove empty member", func() error { _, err := s.Remove(ctx, "u", "m", ""); return err }, ErrInvalidArgument},
			{"Contains empty member", func() error { _, err := s.Contains(ctx, "u", ""); return err }, ErrInvalidArgument},
			{"Deadline huge owner", func() error { _, err := s.Deadline(ctx, huge, "m"); return err }, ErrInvalidArgument},
			{"Extend zero ttl", func() error { _, err := s.Extend(ctx, "u", "m", 0); return err }, ErrInvalidArgument},
			{"Extend empty owner", func() error { _, err := s.Extend(ctx, "", "m", time.Second); return err }, ErrInvalidArgument},
			{"Count empty owner", func() error { _, err := s.Count(ctx, ""); return err }, ErrInvalidArgument},
			{"Members empty owner", func() error { _, err := s.Members(ctx, "", 0); return err }, ErrInvalidArgument},
			{"Payload empty member", func() error { _, err := s.Payload(ctx, "u", ""); return err }, ErrInvalidArgument},
			{"Acquire empty owner", func() error { _, err := q.Acquire(ctx, "", "m", time.Second); return err }, ErrInvalidArgument},
			{"Acquire negative ttl", func() error { _, err := q.Acquire(ctx, "u", "n", -1); return err }, ErrInvalidArgument},
			{"Acquire WithLimit(0)", func() error { _, err := q.Acquire(ctx, "u", "n", time.Second, WithLimit(0)); return err }, ErrInvalidArgument},
			{"Acquire WithLimit(huge)", func() error { _, err := q.Acquire(ctx, "u", "n", time.Second, WithLimit(maxLimit+1)); return err }, ErrInvalidArgument},
			{"Release empty member", func() error { _, err := q.Release(ctx, "u", ""); return err }, ErrInvalidArgument},
			{"NewQuota limit 0", func() error { _, err := NewQuota(s, 0); return err }, ErrInvalidArgument},
			{"NewQuota limit -1", func() error { _, err := NewQuota(s, -1); return err }, ErrInvalidArgument},
			{"NewQuota nil set", func() error { _, err := NewQuota(nil, 1); return err }, ErrInvalidArgument},
			{"New empty name", func() error { _, err := Open(context.Background(), b.rdb, ""); return err }, ErrInvalidArgument},
			{"New name with brace", func() error { _, err := Open(context.Background(), b.rdb, "a{b"); return err }, ErrInvalidArgument},
			{"New name with close brace", func() error { _, err := Open(context.Background(), b.rdb, s.Name()+"}"); return err }, ErrInvalidArgument},
			{"New name with space", func() error { _, err := Open(context.Background(), b.rdb, "a b"); return err }, ErrInvalidArgument},
			{"New name with newline", func() error { _, err := Open(context.Background(), b.rdb, "a\nb"); return err }, ErrInvalidArgument},
			{"New name not UTF-8", func() error { _, err := Open(context.Background(), b.rdb, "a\xff"); return err }, ErrInvalidArgument},
			{"New name too long", func() error {
				_, err := Open(context.Background(), b.rdb, strings.Repeat("n", maxNameLen+1))
				return err
			}, ErrInvalidArgument},
			{"New shards 0", func() error { _, err := Open(context.Background(), b.rdb, s.Name(), WithShards(0)); return err }, ErrInvalidArgument},
			{"New shards too many", func() error {
				_, err := Open(context.Background(), b.rdb, s.Name(), WithShards(maxShards+1))
				return err
			}, ErrInvalidArgument},
			{"New nil client", func() error { _, err := Open(context.Background(), nil, "x"); return err }, ErrInvalidArgument},
		}
		for _, c := range cases {
			err := c.call()
			if !errors.Is(err, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			}
		}
		if after := snapshot(t, b.rdb, s.Name()); !reflect.DeepEqual(before, after) {
			t.Fatalf("rejected calls changed the data:\nbefore %v\nafter  %v", before, after)
		}
	})
}

// TestForeignKeyType checks that an owner key of another type, written by
// something else, gives an error, not a panic or a wrong answer.
func TestForeignKeyType(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		q := must[*Quota](t)(NewQuota(s, 3))
		b.rdb.Set(ctx, s.OwnerKey("u"), "not a zset", 0)
		if _, err := s.Add(ctx, "u", "m", time.Second); err == nil {
			t.Fatal("Add over a string key succeeded")
		}
		if _, err := q.Acquire(ctx, "u", "m", time.Second); err == nil {
			t.Fatal("Acquire over a string key succeeded")
		}
		if _, err := s.Members(ctx, "u", 0); err == nil {
			t.Fatal("Members over a string key succeeded")
		}
	})
}
