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
	scriptAcquire  = loadScript("acquire.lua", "wait_gate.lua")
	scriptRemove   = loadScript("remove.lua", "wait_gate.lua")
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
	scriptRenew    = loadScript("wait_renew.lua", "wait_gate.lua")
	scriptLeave    = loadScript("wait_leave.lua", "wait_gate.lua")
)

// loadScript returns lua/prelude.lua, then the helper files libs, then
// lua/<name>, as one script.
func loadScript(name string, libs ...string) *redis.Script {
	return redis.NewScript(luaSource(name, libs...))
}

func luaSource(name string, libs ...string) string {
	src := ""
	for _, f := range append(append([]string{"prelude.lua"}, libs...), name) {
		b, err := luaFS.ReadFile("lua/" + f)
		if err != nil {
			panic("expset: embedded lua/" + f + " missing: " + err.Error())
		}
		if src != "" {
			src += "\n"
		}
		src += string(b)
	}
	return src
}
