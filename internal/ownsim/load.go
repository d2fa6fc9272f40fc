package ownsim

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// Kind is a kind of store call.
type Kind int

// The store calls counted, one per method of ownership.Store.
const (
	Renew Kind = iota
	Claim
	Checkpoint
	Checkpoints
	Relinquish
	Leave
	SetCheckpoint
	kinds
)

var kindNames = [kinds]string{"renew", "claim", "checkpoint", "checkpoints", "relinquish", "leave", "set_checkpoint"}

func (k Kind) String() string { return kindNames[k] }

// Load counts store calls and the records they read.
type Load struct {
	Calls [kinds]int64
	// Rows counts the records the calls read (a renewal reads every
	// partition's record, and each lease's; a checkpoint write reads the
	// lease's record and the checkpoint).
	Rows int64
	// RowsOf counts them by kind of call (for claims: the partitions
	// asked).
	RowsOf [kinds]int64
	// Failed counts the calls that failed (an outage, a timeout).
	Failed int64
}

// Total returns the number of calls.
func (l Load) Total() int64 {
	var n int64
	for _, c := range l.Calls {
		n += c
	}
	return n
}

// Sub returns l - o.
func (l Load) Sub(o Load) Load {
	for k := range l.Calls {
		l.Calls[k] -= o.Calls[k]
		l.RowsOf[k] -= o.RowsOf[k]
	}
	l.Rows -= o.Rows
	l.Failed -= o.Failed
	return l
}

// errCrashed is the error of a crashed member's calls: they never reach
// the store.
var errCrashed = errors.New("ownsim: the member crashed")

// Counted wraps a store shared by a group's members: it counts each
// member's calls, delays those of slow members, fails every call during
// an outage, and drops those of a crashed member. Members reach it
// through For.
type Counted struct {
	inner ownership.Store
	clock Clock

	mu      sync.Mutex
	total   Load
	per     map[string]*Load
	slow    map[string]bool
	slowMin time.Duration
	slowMax time.Duration
	rnd     *rand.Rand
	base    time.Duration
	down    bool
	dead    map[string]bool
}

// NewCounted returns a counting wrapper of inner on clock; rnd draws the
// slow members' latencies.
func NewCounted(inner ownership.Store, clock Clock, rnd *rand.Rand) *Counted {
	return &Counted{inner: inner, clock: clock, per: map[string]*Load{}, slow: map[string]bool{}, dead: map[string]bool{}, rnd: rnd}
}

// SetSlow makes member's calls take between lo and hi (half before the
// store runs them, half after).
func (c *Counted) SetSlow(member string, lo, hi time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slow[member], c.slowMin, c.slowMax = true, lo, hi
}

// SetLatency makes every member's calls take d (a round trip to the
// store).
func (c *Counted) SetLatency(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = d
}

// SetDown makes every call fail (an outage), or succeed again.
func (c *Counted) SetDown(d bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = d
}

// Crash drops every later call of member.
func (c *Counted) Crash(member string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead[member] = true
}

// Revive lets member's calls through again (the instance restarted).
func (c *Counted) Revive(member string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dead, member)
}

// Total returns the load of every member.
func (c *Counted) Total() Load {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Of returns member's load.
func (c *Counted) Of(member string) Load {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.per[member]; l != nil {
		return *l
	}
	return Load{}
}

// Expiration returns the inner store's lease length.
func (c *Counted) Expiration() time.Duration {
	if e, ok := c.inner.(interface{ Expiration() time.Duration }); ok {
		return e.Expiration()
	}
	return 0
}

// For returns member's connection to the store.
func (c *Counted) For(member string) ownership.Store { return &view{c: c, id: member} }

// begin counts a call and waits the first half of its latency; it
// returns the second half.
func (c *Counted) begin(ctx context.Context, member string, k Kind, rows int) (time.Duration, error) {
	c.mu.Lock()
	if c.dead[member] {
		c.mu.Unlock()
		return 0, errCrashed
	}
	c.countLocked(member, k, rows)
	lat := c.base
	if c.slow[member] {
		lat += c.slowMin + time.Duration(c.rnd.Int64N(int64(c.slowMax-c.slowMin)+1))
	}
	c.mu.Unlock()
	if lat > 0 && !c.clock.Wait(ctx, lat/2, nil) {
		return 0, c.fail(member, ctx.Err())
	}
	c.mu.Lock()
	down := c.down
	c.mu.Unlock()
	if down {
		return 0, c.fail(member, ErrDown)
	}
	return lat - lat/2, nil
}

// end waits the second half of a call's latency: the store did the work,
// the caller may not learn of it.
func (c *Counted) end(ctx context.Context, member string, lat time.Duration, err error) error {
	if err != nil {
		return c.fail(member, err)
	}
	if lat > 0 && !c.clock.Wait(ctx, lat, nil) {
		return c.fail(member, ctx.Err())
	}
	return nil
}

// count adds a call of kind k reading rows for member (the table read
// that follows a renewal which found it changed).
func (c *Counted) count(member string, k Kind, rows int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countLocked(member, k, rows)
}

func (c *Counted) countLocked(member string, k Kind, rows int) {
	l := c.per[member]
	if l == nil {
		l = &Load{}
		c.per[member] = l
	}
	l.Calls[k]++
	l.Rows += int64(rows)
	l.RowsOf[k] += int64(rows)
	c.total.Calls[k]++
	c.total.Rows += int64(rows)
	c.total.RowsOf[k] += int64(rows)
}

func (c *Counted) fail(member string, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total.Failed++
	if l := c.per[member]; l != nil {
		l.Failed++
	}
	return err
}

type view struct {
	c  *Counted
	id string
}

func (v *view) Expiration() time.Duration { return v.c.Expiration() }

func (v *view) Renew(ctx context.Context, owner string, partitions []int32, held []ownership.Lease) (ownership.Table, []ownership.Outcome, error) {
	lat, err := v.c.begin(ctx, v.id, Renew, len(partitions)+len(held))
	if err != nil {
		return ownership.Table{}, nil, err
	}
	t, outs, err := v.c.inner.Renew(ctx, owner, partitions, held)
	if err = v.c.end(ctx, v.id, lat, err); err != nil {
		return ownership.Table{}, nil, err
	}
	return t, outs, nil
}

// RenewSince is the inner store's (an ownership.Tracker, else its Renew):
// as redisstore, a call that renews, and a second that reads the table
// only when it changed.
func (v *view) RenewSince(ctx context.Context, owner string, partitions []int32, held []ownership.Lease, since int64) (ownership.Table, []ownership.Outcome, error) {
	tr, ok := v.c.inner.(ownership.Tracker)
	if !ok {
		return v.Renew(ctx, owner, partitions, held)
	}
	lat, err := v.c.begin(ctx, v.id, Renew, len(held))
	if err != nil {
		return ownership.Table{}, nil, err
	}
	t, outs, err := tr.RenewSince(ctx, owner, partitions, held, since)
	if err == nil && !t.Unchanged {
		v.c.count(v.id, Renew, len(partitions))
	}
	if err = v.c.end(ctx, v.id, lat, err); err != nil {
		return ownership.Table{}, nil, err
	}
	return t, outs, nil
}

func (v *view) Claim(ctx context.Context, owner string, claims []ownership.Claim) ([]ownership.Lease, error) {
	lat, err := v.c.begin(ctx, v.id, Claim, len(claims))
	if err != nil {
		return nil, err
	}
	won, err := v.c.inner.Claim(ctx, owner, claims)
	if err = v.c.end(ctx, v.id, lat, err); err != nil {
		return nil, err
	}
	return won, nil
}

func (v *view) Relinquish(ctx context.Context, owner string, held []ownership.Lease) error {
	lat, err := v.c.begin(ctx, v.id, Relinquish, len(held))
	if err != nil {
		return err
	}
	return v.c.end(ctx, v.id, lat, v.c.inner.Relinquish(ctx, owner, held))
}

func (v *view) Leave(ctx context.Context, owner string) error {
	lat, err := v.c.begin(ctx, v.id, Leave, 1)
	if err != nil {
		return err
	}
	return v.c.end(ctx, v.id, lat, v.c.inner.Leave(ctx, owner))
}

func (v *view) Checkpoint(ctx context.Context, owner string, writes []ownership.Write) ([]ownership.Outcome, error) {
	lat, err := v.c.begin(ctx, v.id, Checkpoint, 2*len(writes))
	if err != nil {
		return nil, err
	}
	outs, err := v.c.inner.Checkpoint(ctx, owner, writes)
	if err = v.c.end(ctx, v.id, lat, err); err != nil {
		return nil, err
	}
	return outs, nil
}

func (v *view) Checkpoints(ctx context.Context, partitions []int32) ([]ownership.Checkpoint, error) {
	lat, err := v.c.begin(ctx, v.id, Checkpoints, len(partitions))
	if err != nil {
		return nil, err
	}
	cks, err := v.c.inner.Checkpoints(ctx, partitions)
	if err = v.c.end(ctx, v.id, lat, err); err != nil {
		return nil, err
	}
	return cks, nil
}

func (v *view) SetCheckpoint(ctx context.Context, partition int32, offset int64) error {
	lat, err := v.c.begin(ctx, v.id, SetCheckpoint, 2)
	if err != nil {
		return err
	}
	return v.c.end(ctx, v.id, lat, v.c.inner.SetCheckpoint(ctx, partition, offset))
}
