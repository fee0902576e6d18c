package store

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// parseStreamID returns the two numbers of a stream ID ("ms" alone is
// "ms-0").
func parseStreamID(t *testing.T, id string) (uint64, uint64) {
	t.Helper()
	ms, seq, _ := strings.Cut(id, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	s := uint64(0)
	var err2 error
	if seq != "" {
		s, err2 = strconv.ParseUint(seq, 10, 64)
	}
	if err1 != nil || err2 != nil {
		t.Fatalf("bad stream ID %q", id)
	}
	return m, s
}

// TestStreamIDOrderInLua: forget.lua's after and after_last, which
// compare and step stream IDs as strings, agree with the IDs' numbers.
func TestStreamIDOrderInLua(t *testing.T) {
	ids := []string{"0-0", "0-1", "1", "1-0", "1-9", "1-10", "9-99", "10-0", "99-100", "100-0", "1732800000000-0",
		"1732800000000-5", "1732800000000-12", "1732800000001-0", "1732800000000-999", "999-9"}
	body := `
local out = {}
local n = tonumber(ARGV[1])
for i = 2, n + 1 do
  for j = 2, n + 1 do
    out[#out + 1] = after(ARGV[i], ARGV[j]) and 1 or 0
  end
end
for i = 2, n + 1 do
  out[#out + 1] = after_last(ARGV[i])
end
return out`
	src := Source("groups.lua", "forget.lua") + "\n" + body
	args := []any{len(ids)}
	for _, id := range ids {
		args = append(args, id)
	}
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		v, err := rdb.Eval(context.Background(), src, []string{"expset:{t:0}:x"}, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, a := range ids {
			for _, b := range ids {
				am, as := parseStreamID(t, a)
				bm, bs := parseStreamID(t, b)
				want := am > bm || am == bm && as > bs
				if got := v[k] == int64(1); got != want {
					t.Errorf("after(%s, %s) = %v, want %v", a, b, got, want)
				}
				k++
			}
		}
		for _, id := range ids {
			m, s := parseStreamID(t, id)
			want := strconv.FormatUint(m, 10) + "-" + strconv.FormatUint(s+1, 10)
			if v[k] != want {
				t.Errorf("after_last(%s) = %v, want %s", id, v[k], want)
			}
			k++
		}
	})
}
