package expset_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// The examples of docs/jobs.md: a job service, a worker pool and a Reserve
// loop over one set of reminders. The functions below hold the code the
// doc shows, line for line; the examples run them on an embedded Redis.

// reminderSet opens the set "reminders" on an embedded Redis, and returns
// it with a function that closes everything.
func reminderSet() (context.Context, *expset.Set, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	ctx := context.Background()
	reminders, err := expset.Open(ctx, rdb, "reminders", expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		panic(err)
	}
	return ctx, reminders, func() { _ = rdb.Close(); mr.Close() }
}

// jobService puts, moves, reads and cancels one reminder.
func jobService(ctx context.Context, reminders *expset.Set) error {
	// Put: due in a day, unless rem-42 waits: then put is false (a retried
	// request puts nothing twice).
	due, put, err := reminders.Put(ctx, "rem-42", 24*time.Hour, expset.WithPayload([]byte("call mum")))
	if err != nil {
		return err // Redis failed, or bad input: errors.Is(err, expset.ErrInvalidArgument)
	}
	_, again, err := reminders.Put(ctx, "rem-42", time.Hour)
	if err != nil {
		return err
	}
	fmt.Println("put:", put, "then:", again)
	// Reschedule moves a waiting job, earlier or later.
	moved, err := reminders.Reschedule(ctx, "rem-42", time.Hour)
	if errors.Is(err, expset.ErrNotFound) {
		return nil // not waiting: delivered, cancelled or never put
	} else if err != nil {
		return err
	}
	fmt.Println("moved earlier:", moved.Before(due))
	j, err := reminders.Job(ctx, "rem-42")
	if err != nil {
		return err
	}
	fmt.Println("state:", j.State) // "waiting", "running", "dead" or "" (unknown)
	// Cancel reaches a job until its handler call begins.
	cancelled, err := reminders.Cancel(ctx, "rem-42")
	if err != nil {
		return err
	}
	fmt.Println("cancelled:", cancelled)
	return nil
}

// ExampleSet_Put runs the job service: a reminder put, put again (which
// changes nothing), moved, read and cancelled.
func ExampleSet_Put() {
	ctx, reminders, done := reminderSet()
	defer done()
	if err := jobService(ctx, reminders); err != nil {
		panic(err)
	}
	j, _ := reminders.Job(ctx, "rem-42")
	fmt.Printf("after the cancel: %q\n", j.State)
	// Output:
	// put: true then: false
	// moved earlier: true
	// state: waiting
	// cancelled: true
	// after the cancel: ""
}

// tenantJob puts a reminder of the tenant acme.
func tenantJob(ctx context.Context, reminders *expset.Set) error {
	// A job of acme: one of its members. Reschedule, Cancel, Job and
	// JobDeadLetters take WithOwner too.
	_, _, err := reminders.Put(ctx, "rem-7", time.Hour, expset.WithOwner("acme"))
	return err
}

// ExampleWithOwner runs tenantJob, then cancels the job of acme: the same
// ID without an owner is another job, unknown.
func ExampleWithOwner() {
	ctx, reminders, done := reminderSet()
	defer done()
	if err := tenantJob(ctx, reminders); err != nil {
		panic(err)
	}
	n, _ := reminders.Count(ctx, "acme")
	fmt.Println("acme holds:", n)
	other, _ := reminders.Cancel(ctx, "rem-7")
	cancelled, _ := reminders.Cancel(ctx, "rem-7", expset.WithOwner("acme"))
	n, _ = reminders.Count(ctx, "acme")
	fmt.Println("without its owner:", other, "with it:", cancelled, "then:", n)
	// Output:
	// acme holds: 1
	// without its owner: false with it: true then: 0
}

// addTask queues a task of tenant: a member of the tenant, due after delay.
func addTask(ctx context.Context, reminders *expset.Set, tenant, taskID string, delay time.Duration, task []byte) error {
	_, err := reminders.Add(ctx, tenant, taskID, delay, expset.WithPayload(task))
	return err // Add of a task there already moves its due time
}

// workerPool runs, in every worker process, up to 8 handler calls at once,
// at most 4 of the group over every process and 2 of any one tenant.
func workerPool(ctx context.Context, reminders *expset.Set, hostname string, send func(context.Context, string, string, []byte) error) error {
	// Consume also sweeps: no other process is needed.
	// Up to 8 calls at once here; over every process at most 4 of the
	// group and 2 of one tenant; ownerless jobs (e.Owner "") have no cap
	// of an owner.
	return reminders.Consume(ctx, "notify", hostname, func(ctx context.Context, e expset.Expiry) error {
		return send(ctx, e.Owner, e.Member, e.Payload) // nil: done; an error: retried, then dead-lettered
	}, expset.WithConcurrency(8), expset.WithOwnerConcurrency(2), expset.WithGroupConcurrency(4))
}

// ExampleSet_Consume_workerPool queues six tasks of tenant acme, two of
// globex and two jobs, all due at once, and runs the worker pool until it
// has sent them all: never more than two of a tenant, nor four in all, at
// once.
func ExampleSet_Consume_workerPool() {
	ctx, reminders, done := reminderSet()
	defer done()
	for i := range 8 {
		tenant := map[bool]string{true: "acme", false: "globex"}[i < 6]
		if err := addTask(ctx, reminders, tenant, fmt.Sprintf("task-%d", i), time.Millisecond, []byte("text")); err != nil {
			panic(err)
		}
	}
	for _, id := range []string{"rem-1", "rem-2"} {
		if _, _, err := reminders.Put(ctx, id, 0); err != nil {
			panic(err)
		}
	}
	ctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	running, most, sent := map[string]int{}, 0, map[string]int{}
	all, mostAll := 0, 0
	send := func(_ context.Context, tenant, id string, _ []byte) error {
		mu.Lock()
		running[tenant]++
		if tenant != "" {
			most = max(most, running[tenant])
		}
		all++
		mostAll = max(mostAll, all)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the send itself
		mu.Lock()
		defer mu.Unlock()
		running[tenant]--
		all--
		if sent[tenant]++; sent["acme"]+sent["globex"]+sent[""] == 10 {
			stop()
		}
		return nil
	}
	if err := workerPool(ctx, reminders, "worker-1", send); err != nil {
		panic(err)
	}
	fmt.Printf("sent: acme %d, globex %d, jobs %d; at most %d of a tenant at once; at most 4 in all: %v\n",
		sent["acme"], sent["globex"], sent[""], most, mostAll <= 4)
	// Output:
	// sent: acme 6, globex 2, jobs 2; at most 2 of a tenant at once; at most 4 in all: true
}

// reserveLoop takes one due reminder at a time, in a loop of its own,
// until ctx ends; a failed send comes back after retryIn.
func reserveLoop(ctx context.Context, reminders *expset.Set, hostname string, send func(context.Context, string, []byte) error, retryIn time.Duration) error {
	for {
		r, err := reminders.Reserve(ctx, "notify", hostname) // sweeps, as Consume does
		if err != nil {
			return err // ctx ended
		}
		err = send(ctx, r.Expiry.Member, r.Expiry.Payload)
		if err != nil {
			err = expset.RetryAfter(err, retryIn) // an attempt spent; after WithMaxAttempts, dead-lettered
		}
		if err := r.Finish(ctx, err); err != nil {
			log.Printf("reminder %s: %v", r.Expiry.Member, err) // its lease was lost: another consumer has it
		}
	}
}

// ExampleSet_Reserve_loop runs the Reserve loop over three reminders due at
// once, one of whose sends fails once: it comes back at its second
// attempt.
func ExampleSet_Reserve_loop() {
	ctx, reminders, done := reminderSet()
	defer done()
	for _, id := range []string{"rem-1", "rem-2", "rem-3"} {
		if _, _, err := reminders.Put(ctx, id, 0); err != nil {
			panic(err)
		}
	}
	ctx, stop := context.WithCancel(ctx)
	var sent []string
	failed := false
	send := func(_ context.Context, id string, _ []byte) error {
		if id == "rem-2" && !failed {
			failed = true
			return errors.New("mail server busy")
		}
		sent = append(sent, id)
		if len(sent) == 3 {
			stop()
		}
		return nil
	}
	err := reserveLoop(ctx, reminders, "worker-1", send, 10*time.Millisecond)
	sort.Strings(sent)
	fmt.Println(sent, errors.Is(err, context.Canceled))
	// Output:
	// [rem-1 rem-2 rem-3] true
}
