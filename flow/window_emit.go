package flow

import (
	"slices"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// Windows is every window of one partition that closed with one start:
// the aggregate of each key seen in it.
type Windows[K comparable, A any] struct {
	Topic     string
	Partition int32
	// Start and End bound the windows' event time: [Start, End).
	Start, End time.Time
	Panes      []Pane[K, A]
	// Count is the number of messages in the panes.
	Count int
	// FirstOffset is the lowest source offset of a message in the panes.
	FirstOffset int64
	// Early is true if the windows were emitted before the stream time
	// passed their end plus the lateness: the partition was idle or the
	// input ended.
	Early bool
	// Emitted is when the stage emitted them (processing time), to
	// measure how long writing them takes.
	Emitted time.Time
}

// Pane is one key's aggregate in one window.
//
// Count and FirstOffset say which messages it holds, for a writer that
// must stay right across replays and reassignments: from the same source
// log, the complete aggregate is the one with the lowest FirstOffset (a
// replay that started inside the window misses its first messages) and,
// among those, the highest Count (a window emitted Early misses its last).
// Writing an aggregate only if it is complete by that order, relative to
// the one stored, makes the stored one converge to the complete one
// whatever the order of the writes.
type Pane[K comparable, A any] struct {
	Key         K
	Value       A
	Count       int
	FirstOffset int64
}

func (r *windowRun[T, K, A]) closeIdle(now time.Time) error {
	for _, p := range r.parts {
		if r.gone(p) {
			continue
		}
		if len(p.open) > 0 && now.Sub(p.seen) >= r.w.idle && r.idleAllowed(p) {
			if err := r.emit(p, func(int64) bool { return true }, true); err != nil {
				return err
			}
		}
	}
	return r.in.FlushOutputs(r.ctx)
}

// idleAllowed asks IdleWhenHeld and IdleWhen; a panic in them keeps the
// windows open (the partition is not taken for idle) and is logged once,
// rather than ending a pipeline that a restart would end again.
func (r *windowRun[T, K, A]) idleAllowed(p *partWindows[K, A]) (ok bool) {
	k := p.key
	if r.w.idleWhen == nil && r.w.idleWhenHeld == nil {
		return true
	}
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if !r.idlePanicked {
				r.idlePanicked = true
				r.in.Logger().Error("window: IdleWhen panicked; idle partitions stay open", "panic", v)
			}
		}
	}()
	if r.w.idleWhenHeld != nil {
		held := 0
		for _, win := range p.open {
			held += win.n
		}
		if !r.w.idleWhenHeld(k.topic, k.partition, held) {
			return false
		}
	}
	return r.w.idleWhen == nil || r.w.idleWhen(k.topic, k.partition)
}

func (r *windowRun[T, K, A]) closeAll() error {
	for _, p := range r.parts {
		if r.gone(p) {
			continue
		}
		if err := r.emit(p, func(int64) bool { return true }, true); err != nil {
			return err
		}
	}
	return r.in.FlushOutputs(r.ctx)
}

// emit sends the open windows of p whose start passes, oldest first, one
// Windows message per start.
func (r *windowRun[T, K, A]) emit(p *partWindows[K, A], closes func(start int64) bool, early bool) error {
	for len(p.open) > 0 && closes(p.open[0].start) {
		win := p.open[0]
		p.open[0] = nil
		p.open = p.open[1:]
		win.panes = slices.DeleteFunc(win.panes, func(pn Pane[K, A]) bool { return pn.Count == 0 }) // add panicked
		if win.n == 0 {
			continue
		}
		p.keysHint, p.handlesHint = len(win.panes), len(win.handles)
		size := int64(r.w.size)
		if end := win.start + size; !p.anyClose || end > p.closed {
			p.closed, p.anyClose = end, true
		}
		ws := Windows[K, A]{Topic: p.key.topic, Partition: p.key.partition,
			Start: time.Unix(0, win.start), End: time.Unix(0, win.start+size),
			Panes: win.panes, Count: win.n, FirstOffset: win.first, Early: early, Emitted: time.Now()}
		m := stream.NewMessage(ws, stream.Join(win.handles))
		m.Topic, m.Partition, m.Offset, m.Timestamp = p.key.topic, p.key.partition, win.first, ws.End
		if r.tracer != nil {
			r.tracer.emitted(&win.trace, &m.Envelope, windowsInfo{topic: ws.Topic, partition: ws.Partition,
				start: ws.Start, end: ws.End, count: ws.Count, panes: len(ws.Panes), early: early})
		}
		if err := r.out.Send(r.ctx, m); err != nil {
			return err
		}
	}
	return nil
}
