package expset

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMaxBatchMatchesLua checks that the scripts' MAX_BATCH is maxBatch.
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
	if n, _ := strconv.Atoi(string(m[1])); n != maxBatch {
		t.Fatalf("MAX_BATCH = %d in lua/prelude.lua, maxBatch = %d in scripts.go", n, maxBatch)
	}
}

// TestTTLBucketMatchesLua checks that the scripts' TTL_BUCKET is ttlBucket.
func TestTTLBucketMatchesLua(t *testing.T) {
	t.Parallel()
	want := "local TTL_BUCKET = " + strconv.FormatInt(ttlBucket.Milliseconds(), 10) + "\n"
	if src := luaSource(true, "acquire.lua"); !strings.Contains(src, want) {
		t.Fatalf("lua/prelude.lua lacks %q", want)
	}
}

// TestLeanScriptsLackHelpers checks that the lean scripts are loaded
// without the prelude's helpers section (no closure built per run but
// lib's) and the others with it.
func TestLeanScriptsLackHelpers(t *testing.T) {
	t.Parallel()
	if src := luaSource(true, "acquire.lua"); strings.Contains(src, "local function now_ms") || !strings.Contains(src, "local function lib()") {
		t.Fatal("a lean script keeps the prelude's helpers, or lost lib()")
	}
	if src := luaSource(false, "sweep.lua"); !strings.Contains(src, "local function now_ms") {
		t.Fatal("a script that is not lean lost the prelude's helpers")
	}
	if src := acquireSource(); strings.Contains(src, "local function now_ms") || strings.Contains(src, "ko + ") || !strings.Contains(src, "keys[1]") {
		t.Fatal("acquire's script keeps the helpers or quota.lua's index offsets")
	}
	if src := manySource(); strings.Contains(src, "local function now_ms") || !strings.Contains(src, "keys[ko + 1]") {
		t.Fatal("acquire_many's script keeps the helpers or lost quota.lua's index offsets")
	}
}

// ownerScriptKeys is the one key order of the scripts that work on one
// owner (Set.ownerKeys): each declares it, or KEYS[1] alone; a script's own
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
