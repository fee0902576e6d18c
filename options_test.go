package expset

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestOptionsFirstErrorWins checks the one option rule of every constructor
// and of Consume: the first invalid option is the error, named in it; a nil
// option does nothing.
func TestOptionsFirstErrorWins(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithExpiryEvents())
		handle := func(context.Context, Expiry) error { return nil }
		ended, cancel := context.WithCancel(ctx)
		cancel() // Consume checks its options, then returns at once.
		type run func(nilOption, first, second bool) error
		calls := []struct {
			call          string
			first, second string // the names the errors carry
			run           run
		}{
			{"Open", "WithShards", "WithConsumerGroups", func(n, f, sc bool) error {
				opts := pick[OpenOption](n, f, sc, WithShards(0), WithConsumerGroups(""))
				_, err := Open(ctx, b.rdb, uniqueName(t, b.rdb), opts...)
				return err
			}},
			{"NewQuota", "WithEvictionReceiptTTL(0s)", "WithEvictionReceiptTTL(25h0m0s)", func(n, f, sc bool) error {
				opts := pick[QuotaOption](n, f, sc, WithEvictionReceiptTTL(0), WithEvictionReceiptTTL(25*time.Hour))
				_, err := NewQuota(s, 1, append(opts, WithEvictOldest())...)
				return err
			}},
			{"NewSweeper", "WithPollInterval", "WithEventRetention", func(n, f, sc bool) error {
				_, err := NewSweeper(s, pick[SweeperOption](n, f, sc, WithPollInterval(0), WithEventRetention(0, 0, defaultEventBytes))...)
				return err
			}},
			{"Set.Consume", "WithReadBatch", "WithMaxAttempts", func(n, f, sc bool) error {
				return s.Consume(ended, "g", "c", handle, pick[ConsumeOption](n, f, sc, WithReadBatch(0), WithMaxAttempts(0))...)
			}},
			{"Set.Add", "WithPayload", "", func(n, f, sc bool) error {
				_, err := s.Add(ctx, "u", "m", time.Minute, pick[AddOption](n, f, false, WithPayload([]byte("x")), nil)...)
				return err
			}},
			{"Set.Put", "WithOwner", "WithPayload", func(n, f, sc bool) error {
				_, _, err := s.Put(ctx, "j", time.Minute, pick[PutOption](n, f, sc, WithOwner(""), WithPayload([]byte("x")))...)
				return err
			}},
			{"Set.Cancel", "WithOwner", "", func(n, f, sc bool) error {
				_, err := s.Cancel(ctx, "j", pick[JobOption](n, f, false, WithOwner("\x00job:1"), nil)...)
				return err
			}},
			{"Quota.Acquire", "WithLimit", "WithPayload", func(n, f, sc bool) error {
				q, err := NewQuota(s, 1)
				if err != nil {
					return err
				}
				_, err = q.Acquire(ctx, "u", "m", time.Minute, pick[AcquireOption](n, f, sc, WithLimit(0), WithPayload([]byte("x")))...)
				return err
			}},
		}
		for _, c := range calls {
			if err := c.run(true, false, false); err != nil {
				t.Errorf("%s(nil option): %v", c.call, err)
			}
			both, alone := c.run(false, true, true), c.run(false, true, false)
			if both == nil || !errors.Is(both, ErrInvalidArgument) || alone == nil || both.Error() != alone.Error() || !strings.Contains(both.Error(), c.first) {
				t.Errorf("%s(%s, %s): %v, want the first one's error %v, naming it", c.call, c.first, c.second, both, alone)
			}
			if c.second == "" {
				continue
			}
			if err := c.run(false, false, true); err == nil || !strings.Contains(err.Error(), c.second) {
				t.Errorf("%s(%s): %v, want an error naming it", c.call, c.second, err)
			}
		}
	})
}

// pick returns a nil option when nilOption, then first and second when
// asked for, in that order.
func pick[O any](nilOption, useFirst, useSecond bool, first, second O) []O {
	var opts []O
	if nilOption {
		var zero O
		opts = append(opts, zero)
	}
	if useFirst {
		opts = append(opts, first)
	}
	if useSecond {
		opts = append(opts, second)
	}
	return opts
}

// TestEvictionReceiptTTLNeedsEvictOldest: WithEvictionReceiptTTL alone fails
// NewQuota naming both options, in either order with WithEvictOldest it is
// accepted. NewQuota touches no Redis.
func TestEvictionReceiptTTLNeedsEvictOldest(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	s := must[*Set](t)(Open(context.Background(), rdb, "receipts"))
	_, err := NewQuota(s, 3, WithEvictionReceiptTTL(time.Minute), WithRefreshOnReacquire())
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithEvictionReceiptTTL") || !strings.Contains(err.Error(), "WithEvictOldest") {
		t.Errorf("NewQuota(WithEvictionReceiptTTL alone) = %v, want ErrInvalidArgument naming both options", err)
	}
	for _, opts := range [][]QuotaOption{
		{WithEvictionReceiptTTL(time.Minute), WithEvictOldest()},
		{WithEvictOldest(), WithEvictionReceiptTTL(time.Minute)},
	} {
		q, err := NewQuota(s, 3, opts...)
		if err != nil || q.receiptTTL != time.Minute {
			t.Errorf("NewQuota(both) = %v; receipt TTL %v, want 1m0s", err, q.receiptTTL)
		}
	}
}

// TestOptionsMisappliedDoNotCompile type-checks small programs against this
// package's compiled export data: an option given to a call that does not
// read it is a type error, the same option given to its own call is not.
func TestOptionsMisappliedDoNotCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the package's export data with go list")
	}
	exports := exportData(t)
	check := func(body string) error {
		src := "package p\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/expset/expset\"\n\t\"github.com/expset/expset/idcodec\"\n)\n\n" +
			"var _, _ = time.Second, idcodec.New\n\nfunc f(ctx context.Context, s *expset.Set, q *expset.Quota) {\n" + body + "\n}\n"
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "p.go", src, 0)
		if err != nil {
			t.Fatalf("parse %q: %v", body, err)
		}
		imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			file, ok := exports[path]
			if !ok || file == "" {
				return nil, errors.New("no export data for " + path)
			}
			return os.Open(file)
		})
		_, err = (&types.Config{Importer: imp}).Check("p", fset, []*ast.File{f}, nil)
		return err
	}
	for _, c := range []struct {
		wrong, right string
	}{
		{"_, _ = idcodec.New(idcodec.Twitter, expset.WithShards(4))",
			"_, _ = idcodec.New(idcodec.Twitter, idcodec.KeepTimeSeq())"},
		{"_, _ = expset.NewQuota(s, 3, expset.WithPollInterval(time.Second))",
			"_, _ = expset.NewQuota(s, 3, expset.WithEvictOldest())"},
		{"_, _ = expset.Open(ctx, nil, \"n\", expset.WithEventRetention(time.Hour, 10, 64<<20))",
			"_, _ = expset.NewSweeper(s, expset.WithEventRetention(time.Hour, 10, 64<<20), expset.WithPollInterval(time.Second))"},
		{"_, _ = s.Add(ctx, \"o\", \"m\", time.Minute, expset.WithLimit(2))",
			"_, _ = q.Acquire(ctx, \"o\", \"m\", time.Minute, expset.WithLimit(2), expset.WithPayload(nil))"},
		{"_ = s.Consume(ctx, \"g\", \"c\", nil, expset.WithMembersPerBatch(5))",
			"_ = s.Consume(ctx, \"g\", \"c\", nil, expset.WithLeaseTTL(time.Second), expset.WithReadBatch(5))"},
		{"var _ expset.WriteOption = expset.WithLeaseTTL(time.Second)",
			"var _ expset.AddOption = expset.WithPayload(nil)"},
		{"_, _ = s.Add(ctx, \"o\", \"m\", time.Minute, expset.WithOwner(\"o\"))",
			"_, _, _ = s.Put(ctx, \"id\", time.Minute, expset.WithOwner(\"o\"), expset.WithPayload(nil))"},
		{"_, _ = s.Cancel(ctx, \"id\", expset.WithPayload(nil))",
			"_, _ = s.Job(ctx, \"id\", expset.WithOwner(\"o\"))"},
		{"_, _ = s.Reschedule(ctx, \"id\", time.Minute, expset.WithLimit(1))",
			"_, _ = s.JobDeadLetters(ctx, \"id\", expset.WithOwner(\"o\"))"},
		{"_, _ = s.Add(ctx, \"o\", \"m\", time.Minute, expset.WithCatchUp(0))",
			"_, _ = s.PutSchedule(ctx, \"id\", \"@every 1m\", expset.WithCatchUp(0), expset.WithPayload(nil))"},
	} {
		err := check(c.wrong)
		if err == nil || !strings.Contains(err.Error(), "cannot use") {
			t.Errorf("%s type-checks (%v), want a type error", c.wrong, err)
		}
		if err := check(c.right); err != nil {
			t.Errorf("%s: %v, want it to type-check", c.right, err)
		}
	}
}

// exportData returns the export data files of this package and its
// dependencies by import path, as go list builds them.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".", "./idcodec")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, " ")
		m[path] = file
	}
	return m
}
