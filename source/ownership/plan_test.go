package ownership_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// sim is an in-memory group: ownership records whose age counts in
// rounds of one update interval, members that renew every round, and a
// count of ownership changes.
type sim struct {
	recs    []ownership.Ownership
	renewed []int // round of the last claim or renewal
	members []string
	round   int
	moves   int
	rnd     *rand.Rand
}

const (
	interval   = time.Second
	expiration = 3 * interval
)

func newSim(partitions int) *sim {
	s := &sim{recs: make([]ownership.Ownership, partitions), renewed: make([]int, partitions), rnd: rand.New(rand.NewPCG(1, 2))}
	for i := range s.recs {
		s.recs[i].Partition = int32(i)
	}
	return s
}

func (s *sim) table() ownership.Table {
	t := ownership.Table{Owners: slices.Clone(s.recs)}
	for i := range t.Owners {
		t.Owners[i].Age = time.Duration(s.round-s.renewed[i]) * interval
	}
	for _, m := range s.members {
		t.Members = append(t.Members, ownership.Member{ID: m})
	}
	return t
}

// step runs one round: every member, in a shuffled order, renews what it
// owns and claims what Plan says, each from a table read just before.
func (s *sim) step(strategy ownership.Strategy) {
	s.round++
	order := slices.Clone(s.members)
	s.rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, m := range order {
		for i := range s.recs {
			if s.recs[i].Owner == m && s.round-s.renewed[i] <= int(expiration/interval) {
				s.renewed[i] = s.round
				s.recs[i].Version++
			}
		}
		for _, c := range ownership.Plan(s.table(), m, expiration, strategy, s.rnd) {
			r := &s.recs[c.Partition]
			if r.Version != c.Version {
				continue
			}
			s.moves++
			r.Owner, r.Epoch, r.Version = m, r.Epoch+1, r.Version+1
			s.renewed[c.Partition] = s.round
		}
	}
}

// leave removes members: gracefully (their partitions relinquished) or by
// a crash (their leases left to expire).
func (s *sim) leave(graceful bool, ids ...string) {
	s.members = slices.DeleteFunc(s.members, func(m string) bool { return slices.Contains(ids, m) })
	if graceful {
		for i := range s.recs {
			if slices.Contains(ids, s.recs[i].Owner) {
				s.recs[i].Owner = ""
				s.recs[i].Epoch++
				s.recs[i].Version++
			}
		}
	}
}

// balanced reports whether every member holds its fair share (n/m, or
// one more for n%m of them) and no partition is without a live owner.
func (s *sim) balanced() bool {
	count := map[string]int{}
	t := s.table()
	for _, o := range t.Owners {
		if o.Expired(expiration) || !slices.Contains(s.members, o.Owner) {
			return false
		}
		count[o.Owner]++
	}
	n, m := len(s.recs), len(s.members)
	for _, id := range s.members {
		if c := count[id]; c < n/m || c > n/m+1 {
			return false
		}
	}
	return true
}

// settle runs rounds until balanced, at most limit, and returns how many.
func (s *sim) settle(t *testing.T, strategy ownership.Strategy, limit int, what string) int {
	t.Helper()
	for r := 1; r <= limit; r++ {
		s.step(strategy)
		if s.balanced() {
			return r
		}
	}
	t.Fatalf("%s: not balanced after %d rounds: %s", what, limit, s)
	return 0
}

func (s *sim) String() string {
	count := map[string]int{}
	for _, o := range s.recs {
		count[o.Owner]++
	}
	return fmt.Sprint(count)
}

// 1 -> 5 -> 2 members over 16 partitions: balanced within partitions /
// members + 2 rounds of each change (a crash's leases first expire), then
// not one ownership change over 20 rounds.
func TestPlanConvergesAndStops(t *testing.T) {
	for _, strategy := range []ownership.Strategy{ownership.Balanced, ownership.Greedy} {
		t.Run(fmt.Sprint("strategy=", strategy), func(t *testing.T) {
			s := newSim(16)
			still := func(what string) {
				t.Helper()
				before := s.moves
				for range 20 {
					s.step(strategy)
				}
				if s.moves != before || !s.balanced() {
					t.Fatalf("%s: %d ownership changes over 20 rounds after settling (%s)", what, s.moves-before, s)
				}
			}
			s.members = []string{"a"}
			s.settle(t, strategy, 16/1+2, "one member")
			still("one member")
			s.members = append(s.members, "b", "c", "d", "e")
			s.settle(t, strategy, 16/5+2, "five members")
			still("five members")
			s.leave(true, "c", "d")
			s.settle(t, strategy, 16/3+2, "three members after two left")
			still("three members")
			s.leave(false, "e") // a crash: its leases expire first
			s.settle(t, strategy, int(expiration/interval)+16/2+2, "two members after a crash")
			still("two members")
		})
	}
}

// Both claim every partition without a live owner up to the fair share;
// balanced steals from each owner its excess shared among the members
// below their share, greedy all it lacks; claims go to partitions without
// a live owner before any steal.
func TestPlanClaimsFreeBeforeStealing(t *testing.T) {
	tb := ownership.Table{Members: []ownership.Member{{ID: "a"}, {ID: "b"}}}
	for p := range 8 {
		o := ownership.Ownership{Partition: int32(p), Version: int64(10 + p)}
		if p < 5 {
			o.Owner = "a" // a holds 5 of 8: one above its 4
		}
		if p == 4 {
			o.Age = 2 * expiration // expired
		}
		tb.Owners = append(tb.Owners, o)
	}
	want := []ownership.Claim{{4, 14}, {5, 15}, {6, 16}, {7, 17}}
	for _, st := range []ownership.Strategy{ownership.Balanced, ownership.Greedy} {
		if got := ownership.Plan(tb, "b", expiration, st, nil); !slices.Equal(got, want) {
			t.Fatalf("strategy %d: %+v, want the four partitions without a live owner %+v (nobody processes them: no reason to wait)", st, got, want)
		}
	}
	// a with 4 of 8 and b with none: b's share comes by stealing.
	tb.Owners[4].Age = 0
	tb.Owners[4].Owner = "a"
	for p := 5; p < 8; p++ {
		tb.Owners[p].Owner = "a"
	}
	got := ownership.Plan(tb, "b", expiration, ownership.Greedy, nil)
	if len(got) != 4 {
		t.Fatalf("greedy steal from a holding 8 of 8: %+v, want 4 claims", got)
	}
	if got := ownership.Plan(tb, "b", expiration, ownership.Balanced, nil); len(got) != 4 {
		t.Fatalf("balanced steal from a holding 8 of 8, b the only member below its share: %+v, want 4 claims", got)
	}
	// c and d join: three members below their share of 2 share a's
	// excess of 6, two each.
	tb.Members = append(tb.Members, ownership.Member{ID: "c"}, ownership.Member{ID: "d"})
	if got := ownership.Plan(tb, "b", expiration, ownership.Balanced, nil); len(got) != 2 {
		t.Fatalf("balanced steal from a holding 8 of 8 with three members below their share: %+v, want 2 claims", got)
	}
	tb.Members = tb.Members[:2]
	if got := ownership.Plan(tb, "a", expiration, ownership.Greedy, nil); got != nil {
		t.Fatalf("a, above its share, claims %+v", got)
	}
}

// Members claiming free partitions at once each prefer their own part of
// them (by their rank among the members present), so that their claims
// do not collide and lose to the version check.
func TestPlanSpreadsFreeClaimsAmongMembers(t *testing.T) {
	tb := ownership.Table{Members: []ownership.Member{{ID: "a"}, {ID: "b"}}}
	for p := range 8 {
		tb.Owners = append(tb.Owners, ownership.Ownership{Partition: int32(p), Version: int64(p)})
	}
	a := ownership.Plan(tb, "a", expiration, ownership.Balanced, nil)
	b := ownership.Plan(tb, "b", expiration, ownership.Balanced, nil)
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("a claims %v, b %v: want 4 each", a, b)
	}
	for _, c := range a {
		if slices.Contains(b, c) {
			t.Errorf("a and b both claim partition %d: %v and %v", c.Partition, a, b)
		}
	}
}
