package expset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOptionsFirstErrorWins checks the one option rule of every constructor
// and of Consume: the first invalid option is the error, named in it; an
// option of another call fails naming the call it belongs to; the zero
// Option does nothing.
func TestOptionsFirstErrorWins(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithExpiryEvents())
		handle := func(context.Context, Expiry) error { return nil }
		calls := map[string]func(opts ...Option) error{
			"Open": func(opts ...Option) error {
				_, err := Open(ctx, b.rdb, uniqueName(t, b.rdb), opts...)
				return err
			},
			"NewQuota": func(opts ...Option) error {
				_, err := NewQuota(s, 1, opts...)
				return err
			},
			"NewSweeper": func(opts ...Option) error {
				_, err := NewSweeper(s, opts...)
				return err
			},
			"Set.Consume": func(opts ...Option) error {
				// Ended: Consume checks its options, then returns at once.
				done, cancel := context.WithCancel(ctx)
				cancel()
				return s.Consume(done, "g", "c", handle, opts...)
			},
			"NewCodec": func(opts ...Option) error {
				_, err := NewCodec(Twitter, opts...)
				return err
			},
		}
		own := map[string][2]Option{
			"Open":        {WithShards(0), WithEventRetention(0, 1)},
			"NewQuota":    {WithEvictionReceiptTTL(0), WithEvictionReceiptTTL(25 * time.Hour)},
			"NewSweeper":  {WithPollInterval(0), WithLeaseTTL(0)},
			"Set.Consume": {WithReadBatch(0), WithMaxAttempts(0)},
			"NewCodec":    {codecOption("KeepFirst", func(*Codec) error { return errors.New("first") }), codecOption("KeepSecond", func(*Codec) error { return errors.New("second") })},
		}
		foreign := map[string]Option{
			"Open": WithEvictOldest(), "NewQuota": WithShards(2), "NewSweeper": WithReadBatch(5),
			"Set.Consume": WithMembersPerBatch(5), "NewCodec": WithPayloadStorage(),
		}
		for call, run := range calls {
			if err := run(Option{}); err != nil {
				t.Errorf("%s(zero Option): %v", call, err)
			}
			first, second := own[call][0], own[call][1]
			err, alone := run(first, second), run(first)
			if err == nil || alone == nil || err.Error() != alone.Error() || !strings.Contains(err.Error(), first.name) && call != "NewCodec" {
				t.Errorf("%s(%s, %s): %v, want the first one's error %v, naming it", call, first.name, second.name, err, alone)
			}
			f := foreign[call]
			err = run(f, first)
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), f.name+" is an option of "+f.where.String()+", not of "+call) {
				t.Errorf("%s(%s): %v, want ErrInvalidArgument naming where it belongs", call, f.name, err)
			}
		}
	})
}
