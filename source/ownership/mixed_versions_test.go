package ownership_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// The scripts of the release before the store stamped its table, as an
// instance of that release runs them during a rolling upgrade: they write
// the same records, but leave the stamp as it was.
const olderPrelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function d(x) return string.format('%d', x) end
local function bump(k)
  local e = math.max(tonumber(redis.call('HGET', k, 'epoch') or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('HSET', k, 'epoch', d(e))
  return e
end
`

var (
	olderRenew = redis.NewScript(olderPrelude + `
local me, exp, h = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 1, h do
  local k = KEYS[2 + tonumber(ARGV[2 + 2 * i])]
  local r = redis.call('HMGET', k, 'owner', 'epoch', 'modified')
  if r[1] == me and r[2] == ARGV[3 + 2 * i] and r[3] and now - tonumber(r[3]) <= exp then
    redis.call('HSET', k, 'modified', d(now))
    redis.call('HINCRBY', k, 'version', 1)
    out[i] = 0
  else
    out[i] = 1
  end
end
if me ~= '' then redis.call('HSET', KEYS[1], me, d(now)) end
local m = redis.call('HGETALL', KEYS[1])
for i = 1, #m, 2 do
  if now - tonumber(m[i + 1]) > exp then redis.call('HDEL', KEYS[1], m[i]) end
end
return out
`)
	olderClaim = redis.NewScript(olderPrelude + `
local out = {}
for i = 1, #KEYS do
  local v = tonumber(redis.call('HGET', KEYS[i], 'version') or '0')
  if v == tonumber(ARGV[1 + i]) then
    out[i] = bump(KEYS[i])
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    redis.call('HSET', KEYS[i], 'owner', ARGV[1], 'modified', d(now))
  else
    out[i] = -1
  end
end
return out
`)
	olderRelinquish = redis.NewScript(olderPrelude + `
for i = 1, #KEYS do
  local r = redis.call('HMGET', KEYS[i], 'owner', 'epoch')
  if r[1] == ARGV[1] and r[2] == ARGV[1 + i] then
    redis.call('HSET', KEYS[i], 'owner', '', 'modified', d(now))
    bump(KEYS[i])
    redis.call('HINCRBY', KEYS[i], 'version', 1)
  end
end
return 0
`)
	olderLeave = redis.NewScript(`return redis.call('HDEL', KEYS[1], ARGV[1])`)
)

// olderInstance is an instance of the previous release in the group "s",
// "g": it claims partitions, renews them and its presence every interval
// (dropping those refused), and at the end relinquishes them and leaves,
// all by the previous release's scripts.
type olderInstance struct {
	c      *redis.Client
	id     string
	exp    time.Duration
	mu     sync.Mutex
	leases map[int32]int64
}

const olderPrefix = "sluice:own:{/s/g}"

func olderKey(p int32) string { return fmt.Sprintf("%s:o:%d", olderPrefix, p) }

func (o *olderInstance) claim(ctx context.Context, ps ...int32) error {
	keys, args := []string{}, []any{o.id}
	for _, p := range ps {
		keys, args = append(keys, olderKey(p)), append(args, 0)
	}
	epochs, err := olderClaim.Run(ctx, o.c, keys, args...).Int64Slice()
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, e := range epochs {
		if e > 0 {
			o.leases[ps[i]] = e
		}
	}
	return nil
}

func (o *olderInstance) renew(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys, args := []string{olderPrefix + ":m"}, []any{o.id, o.exp.Milliseconds(), len(o.leases)}
	var ps []int32
	for p, e := range o.leases {
		keys = append(keys, olderKey(p))
		args = append(args, len(ps), e)
		ps = append(ps, p)
	}
	outs, err := olderRenew.Run(ctx, o.c, keys, args...).Int64Slice()
	if err != nil {
		return err
	}
	for i, out := range outs {
		if out != 0 {
			delete(o.leases, ps[i])
		}
	}
	return nil
}

func (o *olderInstance) held() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.leases)
}

func (o *olderInstance) close(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys, args := []string{}, []any{o.id}
	for p, e := range o.leases {
		keys, args = append(keys, olderKey(p)), append(args, e)
	}
	if len(keys) > 0 {
		if err := olderRelinquish.Run(ctx, o.c, keys, args...).Err(); err != nil {
			return err
		}
	}
	o.leases = map[int32]int64{}
	return olderLeave.Run(ctx, o.c, []string{olderPrefix + ":m"}, o.id).Err()
}

// During a rolling upgrade, an instance of the previous release that
// shuts down relinquishes its partitions so that the others claim them at
// their next round (docs/ownership.md: "another instance takes them
// within one interval"). Its scripts leave the stamp as it was: members
// of this release that took the stamp for unchanged would keep their last
// table, in which those partitions are still owned, and leave them unread
// until they read the whole table anyway (every 30 rounds) — the last
// instance of the old release to stop would leave its partitions unread
// for up to 30 intervals (5 minutes at the default 10 s).
func TestPartitionsAnOlderInstanceRelinquishedAreClaimedAtOnce(t *testing.T) {
	const partitions = 4
	const interval, expiration = 100 * time.Millisecond, 600 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	old := &olderInstance{c: c, id: "old", exp: expiration, leases: map[int32]int64{}}
	if err := old.claim(ctx, 0, 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	if old.held() != partitions {
		t.Fatalf("the older instance holds %d partitions, want %d", old.held(), partitions)
	}
	stopOld := make(chan struct{})
	oldDone := make(chan struct{})
	go func() {
		defer close(oldDone)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stopOld:
				return
			case <-tick.C:
				if err := old.renew(ctx); err != nil && ctx.Err() == nil {
					t.Error(err)
				}
			}
		}
	}()
	stoppedOld := false
	stopRenewing := func() {
		if !stoppedOld {
			stoppedOld = true
			close(stopOld)
			<-oldDone
		}
	}
	defer stopRenewing()

	srcs, bals := startRedisMembers(t, c, []string{"new-a", "new-b"}, partitions, interval, expiration)
	// Three members over four partitions: the new ones steal one each,
	// the older instance keeps two.
	deadline := time.Now().Add(30 * time.Second)
	for len(srcs[0].owned()) != 1 || len(srcs[1].owned()) != 1 || old.held() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not settled after 30 s: new members own %v and %v, the older instance %d", srcs[0].owned(), srcs[1].owned(), old.held())
		}
		time.Sleep(interval / 2)
	}
	time.Sleep(3 * interval) // the last steal read by both
	stopRenewing()
	if err := old.close(ctx); err != nil {
		t.Fatal(err)
	}
	rounds := func() int64 { return min(bals[0].Stats().Rounds, bals[1].Stats().Rounds) }
	r0 := rounds()
	deadline = time.Now().Add(30 * time.Second)
	for len(srcs[0].owned())+len(srcs[1].owned()) != partitions {
		if time.Now().After(deadline) {
			t.Fatalf("the partitions the older instance relinquished still unowned after 30 s: %v and %v", srcs[0].owned(), srcs[1].owned())
		}
		time.Sleep(interval / 4)
	}
	// At its next round a member reads the relinquished partitions free and
	// claims them (up to its share of two); a few rounds allow for a claim
	// lost to the other member.
	if n := rounds() - r0; n > 5 {
		t.Fatalf("the partitions the older instance relinquished were claimed %d rounds after (new members own %v and %v); want within 5: the members kept a table in which the older instance still held them",
			n, srcs[0].owned(), srcs[1].owned())
	}
}
