package expset

import (
	"sort"
	"time"
)

// quotaModel is the semantics of a Set and its quotas as README.md and the
// doc comments state them, written plainly in Go with no Redis in sight.
// FuzzQuotaModel runs the same operations on both and compares every answer.
//
//   - A member is live while now < deadline; at its deadline it is gone for
//     every read, and for every count.
//   - Add upserts with deadline now+ttl (it may move a deadline earlier).
//   - Acquire of a live member is Allowed and Existing, keeping its deadline
//     (WithRefreshOnReacquire: the deadline becomes now+ttl). Otherwise, with
//     count live members and count >= limit, it denies with RetryAfter = the
//     deadline of the (count-limit+1)-th earliest live member - now, or with
//     WithEvictOldest evicts the count-limit+1 earliest live members (ties
//     by member byte order) and adds. Below the limit it adds.
//   - Extend of a live member makes its deadline max(deadline, now+ttl); an
//     absent or expired member is not found.
//   - With WithEvictOldest, an Acquire that evicted leaves a receipt for
//     DefaultEvictionReceiptTTL: an Acquire of the same member while it
//     holds the deadline that admission gave it reports the same evictions
//     (a refresh moves the receipt to the new deadline).
//   - Remove counts only the live members it removed.
//   - Members lists the live members, earliest deadline first, ties by
//     member byte order.
type quotaModel struct {
	now      int64                       // Unix ms
	owners   map[string]map[string]int64 // owner -> member -> deadline (Unix ms), expired ones included
	receipts map[[2]string]modelReceipt  // {owner, member} -> the evictions of its admission
}

// modelReceipt is what an admission that evicted left for its retries.
type modelReceipt struct {
	deadline, expires int64 // Unix ms
	evicted           []string
}

func newQuotaModel(now time.Time) *quotaModel {
	return &quotaModel{now: now.UnixMilli(), owners: map[string]map[string]int64{}, receipts: map[[2]string]modelReceipt{}}
}

func (m *quotaModel) advance(d time.Duration) { m.now += d.Milliseconds() }

// live returns owner's live members, earliest deadline first, ties in
// member byte order.
func (m *quotaModel) live(owner string) []Member {
	var out []Member
	for id, d := range m.owners[owner] {
		if m.now < d {
			out = append(out, Member{ID: id, Deadline: msTime(d)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Deadline.Equal(out[j].Deadline) {
			return out[i].Deadline.Before(out[j].Deadline)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (m *quotaModel) deadline(owner, member string) (int64, bool) {
	d, ok := m.owners[owner][member]
	return d, ok && m.now < d
}

func (m *quotaModel) put(owner, member string, d int64) {
	if m.owners[owner] == nil {
		m.owners[owner] = map[string]int64{}
	}
	m.owners[owner][member] = d
}

// dropExpired forgets owner's expired members, as every write does.
func (m *quotaModel) dropExpired(owner string) {
	for id, d := range m.owners[owner] {
		if d <= m.now {
			delete(m.owners[owner], id)
		}
	}
}

func (m *quotaModel) add(owner, member string, ttl time.Duration) time.Time {
	m.dropExpired(owner)
	d := m.now + ttl.Milliseconds()
	m.put(owner, member, d)
	return msTime(d)
}

func (m *quotaModel) acquire(owner, member string, ttl time.Duration, limit int, evict, refresh bool) Decision {
	m.dropExpired(owner)
	live := m.live(owner)
	count := len(live)
	if d, ok := m.deadline(owner, member); ok {
		rc, held := m.receipts[[2]string{owner, member}]
		held = held && evict && rc.deadline == d && m.now < rc.expires
		if refresh {
			d = m.now + ttl.Milliseconds()
			m.put(owner, member, d)
			if held {
				rc.deadline = d
				m.receipts[[2]string{owner, member}] = rc
			}
		}
		dec := Decision{Allowed: true, Existing: true, Count: count, Limit: limit, Deadline: msTime(d)}
		if held {
			dec.Evicted = rc.evicted
		}
		return dec
	}
	dec := Decision{Allowed: true, Limit: limit}
	if count >= limit {
		k := count - limit + 1
		if !evict {
			return Decision{Count: count, Limit: limit, RetryAfter: time.Duration(live[k-1].Deadline.UnixMilli()-m.now) * time.Millisecond}
		}
		for _, e := range live[:k] {
			delete(m.owners[owner], e.ID)
			dec.Evicted = append(dec.Evicted, e.ID)
		}
		count -= k
	}
	d := m.now + ttl.Milliseconds()
	m.put(owner, member, d)
	dec.Count, dec.Deadline = count+1, msTime(d)
	if dec.Evicted != nil {
		m.receipts[[2]string{owner, member}] = modelReceipt{d, m.now + DefaultEvictionReceiptTTL.Milliseconds(), dec.Evicted}
	}
	return dec
}

func (m *quotaModel) remove(owner string, members ...string) int {
	m.dropExpired(owner)
	n := 0
	for _, id := range members {
		if _, ok := m.owners[owner][id]; ok {
			delete(m.owners[owner], id)
			n++
		}
	}
	return n
}

func (m *quotaModel) extend(owner, member string, ttl time.Duration) (time.Time, bool) {
	d, ok := m.deadline(owner, member)
	if !ok {
		return time.Time{}, false
	}
	if nd := m.now + ttl.Milliseconds(); nd > d {
		d = nd
		m.put(owner, member, d)
	}
	return msTime(d), true
}
