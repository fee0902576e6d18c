package store

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMaxBatchMatchesLua checks that the scripts' MAX_BATCH is MaxBatch.
func TestMaxBatchMatchesLua(t *testing.T) {
	t.Parallel()
	src, err := luaFS.ReadFile("lua/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^local MAX_BATCH = (\d+)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("lua/prelude.lua defines no MAX_BATCH")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != MaxBatch {
		t.Fatalf("MAX_BATCH = %d in lua/prelude.lua, MaxBatch = %d in scripts.go", n, MaxBatch)
	}
}

// TestTTLBucketMatchesLua checks that the scripts' TTL_BUCKET is TTLBucket.
func TestTTLBucketMatchesLua(t *testing.T) {
	t.Parallel()
	want := "local TTL_BUCKET = " + strconv.FormatInt(TTLBucket.Milliseconds(), 10) + "\n"
	if src := Source("acquire.lua"); !strings.Contains(src, want) {
		t.Fatalf("lua/prelude.lua lacks %q", want)
	}
}

// TestScriptHeaders checks that every file in lua/ starts with its name,
// and that each script's own file (all but the shared files that scripts.go
// places before them) states its KEYS, ARGV and reply in its header.
func TestScriptHeaders(t *testing.T) {
	t.Parallel()
	shared := map[string]bool{"prelude.lua": true, "lib.lua": true, "now.lua": true, "wait_gate.lua": true, "quota.lua": true, "groups.lua": true, "forget.lua": true, "jobs.lua": true, "time_ms.lua": true, "write_now.lua": true}
	files, err := luaFS.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := luaFS.ReadFile("lua/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(src), "-- "+f.Name()+": ") {
			t.Errorf("lua/%s does not start with its name", f.Name())
		}
		if shared[f.Name()] {
			continue
		}
		var header strings.Builder
		for _, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header.WriteString(line + "\n")
		}
		for _, want := range []string{"-- KEYS", "-- ARGV", "Reply"} {
			if !strings.Contains(header.String(), want) {
				t.Errorf("lua/%s: the header does not state %q", f.Name(), want)
			}
		}
	}
}

// ownerScriptKeys is the one key order of the scripts that work on one
// owner (Store.ownerKeys): each declares it, or KEYS[1] alone; a script's own
// keys, if any, come after it (acquire.lua's eviction receipt, KEYS[5]).
var ownerScriptKeys = []string{
	"owner sorted set      expset:{name:S}:o:<owner>",
	"shard due index       expset:{name:S}:due",
	"shard event stream    expset:{name:S}:ev",
	"owner payload hash    expset:{name:S}:p:<owner>",
}

// TestOwnerScriptsKeyOrder checks the headers of the owner scripts: every
// KEYS[1] to KEYS[4] they name is that key of the one order ownerKeys
// builds.
func TestOwnerScriptsKeyOrder(t *testing.T) {
	t.Parallel()
	keyLine := regexp.MustCompile(`^-- KEYS\[(\d)\]\s+(.*)$`)
	for _, name := range []string{"add.lua", "acquire.lua", "remove.lua", "extend.lua", "payload.lua", "count.lua", "deadline.lua", "members.lua"} {
		src, err := luaFS.ReadFile("lua/" + name)
		if err != nil {
			t.Fatal(err)
		}
		named := 0
		for _, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(line, "--") {
				break // the header ends at the first line of code
			}
			m := keyLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			i, _ := strconv.Atoi(m[1])
			if i < 1 {
				t.Errorf("%s: KEYS[%d]", name, i)
			} else if i <= len(ownerScriptKeys) && !strings.HasPrefix(m[2], ownerScriptKeys[i-1]) {
				t.Errorf("%s: KEYS[%d] is %q; the owner scripts' KEYS[%d] is %q", name, i, m[2], i, ownerScriptKeys[i-1])
			}
			named++
		}
		if named == 0 {
			t.Errorf("%s: the header names no KEYS", name)
		}
	}
}

// TestScriptsDefineWhatTheyCall checks that every script that calls lib()
// includes lib.lua, which defines it (a script without it fails on the
// server only on the path that calls it), and that a script that never
// calls it leaves it out (its definition costs every run a closure).
func TestScriptsDefineWhatTheyCall(t *testing.T) {
	t.Parallel()
	if len(sources) < len(named)-1 { // deadscan.lua alone is made without script
		t.Fatalf("%d scripts recorded, %d named", len(sources), len(named))
	}
	for sc, src := range sources {
		defines := strings.Contains(src, "\nlocal function lib()\n")
		code := src
		if defines {
			code = strings.Replace(src, file("lib.lua"), "", 1)
		}
		calls := false
		for _, line := range strings.Split(code, "\n") {
			if i := strings.Index(line, "--"); i >= 0 {
				line = line[:i]
			}
			if strings.Contains(line, "lib()") {
				calls = true
				break
			}
		}
		if calls != defines {
			t.Errorf("script %s: calls lib() %v, includes lib.lua %v", sc.Hash(), calls, defines)
		}
	}
}

// TestJobOwnerStartsAtDueKeyLength checks what put.lua and reschedule.lua
// rely on to name a bucket's owner without searching its key: the owner
// starts at the position (1-based, as Lua counts) that is the length of the
// shard's due index key; and put_now.lua: one past the length of its
// event stream's key.
func TestJobOwnerStartsAtDueKeyLength(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "orders", "x{y}z", strings.Repeat("n", 300)} {
		for _, shard := range []int{0, 9, 10, 255} {
			k := NewKeys(name, shard)
			bucket := k.Owner + JobOwnerPrefix + "4095"
			if got := bucket[len(k.Due)-1:]; got != JobOwnerPrefix+"4095" {
				t.Errorf("set %q shard %d: the bucket key's tail from #due is %q", name, shard, got)
			}
			if got := bucket[len(k.Events):]; got != JobOwnerPrefix+"4095" {
				t.Errorf("set %q shard %d: the bucket key's tail from #ev + 1 is %q", name, shard, got)
			}
		}
	}
}
