package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rejoin follows this member's own JoinGroup and SyncGroup requests (the
// classic protocol) through the client's hooks. A commit sent between the
// two would be refused: with the old generation once the group has moved
// to the next (ILLEGAL_GENERATION), with the new one before the
// assignment is synced (REBALANCE_IN_PROGRESS). franz-go's own commits
// wait for its joins the same way; the source sends its commits itself
// (to carry the generation its offsets were computed in), so it follows
// the requests instead.
type rejoin struct {
	mu   sync.Mutex
	done chan struct{} // closed when the rejoin in progress ends; nil when none
}

// OnBrokerWrite implements kgo.HookBrokerWrite: a JoinGroup written starts
// a rejoin (a retried one continues it).
func (r *rejoin) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != int16(kmsg.JoinGroup) || err != nil {
		return
	}
	r.mu.Lock()
	if r.done == nil {
		r.done = make(chan struct{})
	}
	r.mu.Unlock()
}

// OnBrokerE2E implements kgo.HookBrokerE2E: the SyncGroup answered (or
// failed) ends the rejoin, as does a LeaveGroup (a member leaving syncs
// no more). A failed sync makes franz-go join again, which starts another.
func (r *rejoin) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, _ kgo.BrokerE2E) {
	if key != int16(kmsg.SyncGroup) && key != int16(kmsg.LeaveGroup) {
		return
	}
	r.mu.Lock()
	if r.done != nil {
		close(r.done)
		r.done = nil
	}
	r.mu.Unlock()
}

// wait returns once no rejoin is in progress, ctx has ended or until has
// passed.
func (r *rejoin) wait(ctx context.Context, until time.Time) {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
}
