package ownership

import (
	"math/rand/v2"
	"sort"
	"time"
)

// Strategy is how many partitions a member claims in one round.
type Strategy int

const (
	// Balanced (the default) claims partitions without a live owner up to
	// its fair share in one round — nobody processes them — and, in a
	// round without such claims, steals from each member above its share
	// at most that member's excess divided among the members below
	// theirs: a member joining takes its share in a few rounds however
	// large it is, and members joining at once do not take more from one
	// owner than it has in excess.
	Balanced Strategy = iota
	// Greedy steals every partition it lacks in one round, from the
	// members holding most.
	Greedy
)

// Plan decides what member me claims this round, from a fresh table: the
// partitions it lacks to reach its fair share, first among those without
// a live owner (none, or a lease expired by the store's clock), then from
// owners above their fair share (with Balanced: only in a round without
// free claims, and from each owner its excess shared among the members
// below their share).
//
// Among partitions without a live owner, those whose lapsed lease was
// me's come first (after an outage, each member takes back its own),
// then those of me's part (partition mod members = me's rank), so that
// members claiming at once do not collide.
//
// The fair share of n partitions among m members present (me counted,
// idle members included) is n/m, and n%m members may hold one more. A
// member takes one more only while fewer than n%m live owners hold
// n/m+1; it steals only from an owner above what it may hold, or from
// one holding n/m+1 while more than n%m do. So once every member holds
// its share no member wants more and nothing moves: no ping-pong.
// Members are counted from the table's Members and from the owners of
// live leases. rnd picks among equal candidates (spreading claimants
// over the partitions); nil picks the lowest partition.
func Plan(t Table, me string, expiration time.Duration, strategy Strategy, rnd *rand.Rand) []Claim {
	live := map[string][]int{} // live owner -> indexes in t.Owners
	members := map[string]bool{me: true}
	for _, m := range t.Members {
		members[m.ID] = true
	}
	var free, mineFree []int // mineFree: lapsed leases of me (an outage)
	for i, o := range t.Owners {
		if o.Expired(expiration) {
			if o.Owner == me {
				mineFree = append(mineFree, i)
			} else {
				free = append(free, i)
			}
			continue
		}
		live[o.Owner] = append(live[o.Owner], i)
		members[o.Owner] = true
	}
	n, m := len(t.Owners), len(members)
	if n == 0 {
		return nil
	}
	base, extra := n/m, n%m
	mine := len(live[me])
	atMax := 0 // live owners other than me holding base+1 or more
	for id, ps := range live {
		if id != me && len(ps) > base {
			atMax++
		}
	}
	// want is how many more me may take: up to base, or base+1 while a
	// slot for one more is left.
	want := base - mine
	if mine >= base && extra > 0 && atMax < extra && mine < base+1 {
		want = base + 1 - mine
	}
	if want <= 0 {
		return nil
	}
	pick := func(c []int) int {
		if rnd == nil {
			return 0
		}
		return rnd.IntN(len(c))
	}
	// Of the others, those of my part first: partition p is the part of
	// the member ranked p mod m among the members present (sorted by
	// id), so that members claiming at once, seeing the same members,
	// pick different partitions rather than lose to the version check.
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rank := sort.SearchStrings(ids, me)
	var part, rest []int
	for _, i := range free {
		if int(t.Owners[i].Partition)%m == rank {
			part = append(part, i)
		} else {
			rest = append(rest, i)
		}
	}
	var claims []Claim
	for _, free := range [][]int{mineFree, part, rest} { // mine first: they need not move
		for want > 0 && len(free) > 0 {
			k := pick(free)
			o := t.Owners[free[k]]
			claims = append(claims, Claim{Partition: o.Partition, Version: o.Version})
			free = append(free[:k], free[k+1:]...)
			want--
		}
	}
	// Steal: from owners holding more than base+1, or base+1 while more
	// than extra owners do (counting me once I hold base+1), the one
	// holding most first. Balanced steals none in a round that claims
	// free ones, and takes from each owner at most its share of the
	// owner's excess: the members below base (the thieves, me included)
	// each take excess/thieves of it, or, when that is below one, one
	// partition with probability excess/thieves, so that thieves acting
	// at once take about what the owner has in excess, not thieves
	// times as much.
	if strategy == Balanced && len(claims) > 0 {
		want = 0
	}
	if want > 0 {
		owners := make([]string, 0, len(live))
		for id := range live {
			if id != me {
				owners = append(owners, id)
			}
		}
		sort.Strings(owners)
		if rnd != nil && strategy == Balanced { // thieves start at different owners among equals
			rnd.Shuffle(len(owners), func(i, j int) { owners[i], owners[j] = owners[j], owners[i] })
		}
		sort.SliceStable(owners, func(i, j int) bool { return len(live[owners[i]]) > len(live[owners[j]]) })
		thieves := 0
		for id := range members {
			if len(live[id]) < base {
				thieves++
			}
		}
		thieves = max(thieves, 1)
		over := atMax
		for _, id := range owners {
			quota := want
			if strategy == Balanced {
				excess := len(live[id]) - base
				quota = excess / thieves
				if quota == 0 && excess > 0 && (rnd == nil || rnd.IntN(thieves) < excess) {
					quota = 1
				}
			}
			for took := 0; took < quota && want > 0 && (len(live[id]) > base+1 || (len(live[id]) == base+1 && over > extra)); took++ {
				if len(live[id]) == base+1 {
					over--
				}
				ps := live[id]
				k := pick(ps)
				o := t.Owners[ps[k]]
				claims = append(claims, Claim{Partition: o.Partition, Version: o.Version})
				live[id] = append(ps[:k:k], ps[k+1:]...)
				want--
			}
		}
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Partition < claims[j].Partition })
	return claims
}
