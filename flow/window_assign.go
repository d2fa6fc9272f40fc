package flow

import (
	"math"

	"github.com/sluice-streams/sluice/stream"
)

// A partition's windows hold the messages of one assignment of it (see
// Tumbling, "Reassignment"): what another assignment left open is not
// this reader's, and goes when the partition is taken away.

// endNote says that the assignment a of partition key has ended.
type endNote struct {
	key partKey
	a   stream.Assignment
}

// assign makes a the assignment whose messages p holds, dropping what p
// held of another, and watches for its end.
func (r *windowRun[T, K, A]) assign(p *partWindows[K, A], a stream.Assignment) {
	if p.assignment != nil {
		*p = partWindows[K, A]{key: p.key, settler: p.settler, stream: math.MinInt64,
			keysHint: p.keysHint, handlesHint: p.handlesHint}
	}
	p.assignment = a
	if over(a) {
		return
	}
	k := p.key
	r.watchers.Go(func() {
		select {
		case <-a.Ended():
			select {
			case r.ended <- endNote{k, a}:
			case <-r.wctx.Done():
			}
		case <-r.wctx.Done():
		}
	})
}

// over reports whether assignment a has ended.
func over(a stream.Assignment) bool {
	select {
	case <-a.Ended():
		return true
	default:
		return false
	}
}

// forget drops p, whose assignment ended: its open windows are not this
// reader's any more, and their messages stay unsettled for the next one.
func (r *windowRun[T, K, A]) forget(p *partWindows[K, A]) {
	if r.parts[p.key] == p {
		delete(r.parts, p.key)
	}
	if r.last == p {
		r.last = nil
	}
}

// gone reports whether p's assignment has ended, and if so forgets p.
func (r *windowRun[T, K, A]) gone(p *partWindows[K, A]) bool {
	if p.assignment == nil || !over(p.assignment) {
		return false
	}
	r.forget(p)
	return true
}
