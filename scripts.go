package expset

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (go-redis's
// Script.Run), so a flushed script cache costs one extra round trip.
var (
	scriptAdd      = loadScript("add.lua")
	scriptAcquire  = loadScript("acquire.lua")
	scriptRemove   = loadScript("remove.lua")
	scriptExtend   = loadScript("extend.lua")
	scriptDeadline = loadScript("deadline.lua")
	scriptCount    = loadScript("count.lua")
	scriptMembers  = loadScript("members.lua")
	scriptPayload  = loadScript("payload.lua")
	scriptOpen     = loadScript("open.lua")
	scriptSweep    = loadScript("sweep.lua")
	scriptAck      = loadScript("ack.lua")
	scriptBury     = loadScript("bury.lua")
	scriptClaim    = loadScript("claim.lua")
	scriptKick     = loadScript("kick.lua")
)

// maxBatch is the most items one script call takes: members removed (Remove
// sends more in several calls), owners and members of one sweep round
// (WithOwnersPerBatch, WithMembersPerBatch), events read, acknowledged or
// kicked. A script's keys and unpack calls then stay far inside what Redis
// (about 8000 values) and miniredis (about 5000) accept. The scripts call it
// MAX_BATCH (lua/prelude.lua), also the most expired members one write drops.
const maxBatch = 1000

// loadScript returns lua/prelude.lua followed by lua/<name> as one script.
func loadScript(name string) *redis.Script {
	return redis.NewScript(luaSource(name))
}

func luaSource(name string) string {
	prelude, err := luaFS.ReadFile("lua/prelude.lua")
	if err != nil {
		panic("expset: embedded lua/prelude.lua missing: " + err.Error())
	}
	body, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic("expset: embedded lua/" + name + " missing: " + err.Error())
	}
	return string(prelude) + "\n" + string(body)
}
