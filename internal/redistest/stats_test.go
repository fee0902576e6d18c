package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestParseCommandStat(t *testing.T) {
	calls, usec, err := parseCommandStat("calls=10,usec=25,usec_per_call=2.50,rejected_calls=0,failed_calls=0")
	if err != nil || calls != 10 || usec != 25 {
		t.Fatalf("got %d, %v, %v; want 10, 25, nil", calls, usec, err)
	}
	for _, bad := range []string{"", "calls=x,usec=1", "calls=1", "usec=1,usec_per_call=1.00"} {
		if _, _, err := parseCommandStat(bad); err == nil {
			t.Errorf("parseCommandStat(%q): no error", bad)
		}
	}
}

// evalshaDelta runs a loaded script n times through c, once per key, and
// returns how many evalsha calls and what mean time CommandStats saw meanwhile.
func evalshaDelta(t *testing.T, c redis.UniversalClient, keys []string) (int64, float64) {
	t.Helper()
	ctx := context.Background()
	script := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if err := script.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	before, _, err := CommandStats(ctx, c, "EVALSHA")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := script.EvalSha(ctx, c, []string{k}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, perCall, err := CommandStats(ctx, c, "evalsha")
	if err != nil {
		t.Fatal(err)
	}
	if perCall <= 0 {
		t.Errorf("usec per call %v, want > 0", perCall)
	}
	return after - before, perCall
}

func TestCommandStats(t *testing.T) {
	c := Client(t)
	// REDIS_ADDR may name a server other test binaries use too: at least 10.
	if n, _ := evalshaDelta(t, c, strings.Fields("cs:a cs:b cs:c cs:d cs:e cs:f cs:g cs:h cs:i cs:j")); n < 10 {
		t.Fatalf("evalsha calls grew by %d, want >= 10", n)
	}
	if calls, perCall, err := CommandStats(context.Background(), c, "no-such-command"); calls != 0 || perCall != 0 || err != nil {
		t.Fatalf("unknown command: %d, %v, %v", calls, perCall, err)
	}
}

func TestCommandStatsSumsOverMasters(t *testing.T) {
	cc := SharedCluster(t).Client(t)
	var keys []string
	for i := 0; i < 30; i++ {
		keys = append(keys, fmt.Sprintf("cs:%d", i)) // on all three masters
	}
	if n, _ := evalshaDelta(t, cc, keys); n != 30 {
		t.Fatalf("evalsha calls over all masters grew by %d, want 30", n)
	}
}
