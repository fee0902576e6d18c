package expset

import (
	"fmt"
	"strings"

	"github.com/expset/expset/internal/store"
)

// Limits on what a call accepts. Longer values get ErrInvalidArgument
// and nothing is written.
const (
	maxNameLen    = 128             // bytes in a set name
	maxOwnerLen   = 1024            // bytes in an owner
	maxMemberLen  = 1024            // bytes in a member
	maxPayloadLen = 1 << 20         // bytes in a payload
	maxShards     = store.MaxShards // shards of one set (Redis Cluster's slot count)
	maxLimit      = 1 << 30         // a quota's limit
)

// validateName accepts 1 to maxNameLen bytes of ASCII letters, digits and
// "_.:/-": no braces (the name is inside every key's hash tag), no glob
// characters (Drop and operators match keys by pattern), no spaces.
func validateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: set name %q must be 1 to %d bytes", ErrInvalidArgument, name, maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.:/-", c) >= 0) {
			return fmt.Errorf("%w: set name %q holds %q: use letters, digits and _.:/-", ErrInvalidArgument, name, c)
		}
	}
	return nil
}

func validateOwner(owner string) error {
	if p := ownerProblem(owner); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, p)
	}
	return nil
}

// ownerProblem says what is wrong with owner, "" when nothing is.
func ownerProblem(owner string) string {
	if owner == "" || len(owner) > maxOwnerLen {
		return fmt.Sprintf("owner of %d bytes (want 1 to %d)", len(owner), maxOwnerLen)
	}
	if strings.HasPrefix(owner, jobOwnerPrefix) {
		return fmt.Sprintf("owner %q begins with %q, kept for the jobs without owners of Set.Put and the schedules of Set.PutSchedule: use another owner", owner, jobOwnerPrefix)
	}
	return ""
}

func validateMember(member string) error {
	if member == "" || len(member) > maxMemberLen {
		return fmt.Errorf("%w: member of %d bytes (want 1 to %d)", ErrInvalidArgument, len(member), maxMemberLen)
	}
	return nil
}
