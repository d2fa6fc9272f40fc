package flow

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// LateError is the reason a message was not put in a window.
type LateError struct {
	Partition int32
	Offset    int64
	Event     time.Time // the message's event time
	Arrival   time.Time // its arrival (the record's timestamp)
	// Closed is the end of the last window of the partition already
	// emitted, if that is why (zero otherwise).
	Closed time.Time
	// Ahead is true if the event time is too far after the arrival.
	Ahead bool
	// Beyond is true if the event time or the arrival is outside the
	// times windows are computed in: those a nanosecond count holds
	// (1678 to 2261), less twice the window size, lateness and MaxAhead
	// at either end.
	Beyond   bool
	Lateness time.Duration
	MaxAhead time.Duration
}

func (e *LateError) Error() string {
	switch {
	case e.Beyond:
		return fmt.Sprintf("event time %s or arrival %s is outside the times windows of this size, lateness and MaxAhead can be computed in",
			e.Event.UTC().Format(time.RFC3339Nano), e.Arrival.UTC().Format(time.RFC3339Nano))
	case e.Ahead:
		return fmt.Sprintf("event time %s is %v after its arrival %s: more than the %v allowed ahead",
			e.Event.UTC().Format(time.RFC3339Nano), e.Event.Sub(e.Arrival), e.Arrival.UTC().Format(time.RFC3339Nano), e.MaxAhead)
	case !e.Closed.IsZero():
		return fmt.Sprintf("late: event time %s falls in a window already written (partition %d has emitted its windows up to %s)",
			e.Event.UTC().Format(time.RFC3339Nano), e.Partition, e.Closed.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("late: event time %s arrived %v later, at %s: more than the allowed lateness of %v",
		e.Event.UTC().Format(time.RFC3339Nano), e.Arrival.Sub(e.Event), e.Arrival.UTC().Format(time.RFC3339Nano), e.Lateness)
}

type partKey struct {
	topic     string
	partition int32
}

// partWindows is the open windows of one assignment of one partition.
type partWindows[K comparable, A any] struct {
	key        partKey
	settler    stream.Settler    // of the last message, to look the assignment up only when it changes
	assignment stream.Assignment // nil: the source has none
	stream     int64             // stream time, ns: latest arrival seen (math.MinInt64: none)
	closed     int64             // end of the last window emitted, ns
	anyClose   bool              // closed is set
	seen       time.Time         // processing time of the last message
	open       []*openWindow[K, A]
	// The keys and handles of the window emitted last: a new window
	// starts with room for as many, or for as many as the newest one
	// open holds, so that its map and slices do not grow (rehashing and
	// copying) a key at a time on the hot path.
	keysHint, handlesHint int
}

type openWindow[K comparable, A any] struct {
	start   int64 // ns
	index   map[K]int
	panes   []Pane[K, A]
	handles []stream.Handle
	n       int // messages
	first   int64
	trace   windowTrace // with tracing on
}

type windowRun[T any, K comparable, A any] struct {
	w     *tumbling[T, K, A]
	parts map[partKey]*partWindows[K, A]
	last  *partWindows[K, A]
	now   time.Time
	ctx   context.Context
	// The event times and arrivals windows can take (timeRange).
	minTime, maxTime time.Time

	idlePanicked bool
	// The batch being placed and what touch found for its messages, and
	// the index of the next message to place.
	items   []stream.Message[T]
	hints   []touchHint[K, A]
	next    int
	touched int // what touch read, so that the reads are not left out
	in      *stream.Inlet[T]
	out     *stream.Outlet[Windows[K, A]]
	tracer  *windowTracer // nil: tracing off

	// ended receives the assignments that ended, from one watcher
	// goroutine per assignment (watch), which end with wctx.
	ended    chan endNote
	wctx     context.Context
	watchers sync.WaitGroup
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (r *windowRun[T, K, A]) part(m *stream.Message[T]) *partWindows[K, A] {
	if p := r.last; p != nil && p.key.partition == m.Partition && p.key.topic == m.Topic {
		return p
	}
	k := partKey{m.Topic, m.Partition}
	p := r.parts[k]
	if p == nil {
		p = &partWindows[K, A]{key: k, stream: math.MinInt64}
		r.parts[k] = p
	}
	r.last = p
	return p
}

// one puts a message in its window.
func (r *windowRun[T, K, A]) one(m *stream.Message[T]) error {
	w := r.w
	h := r.hint(m)
	p := r.part(m)
	if s := m.Handle().Settler(); s != p.settler {
		if a := m.Handle().Assignment(); a != nil && a != p.assignment {
			if p.assignment != nil && over(a) {
				// A message of an assignment that ended, arriving after the
				// next one's (an unordered stage before the window let it
				// lag): the next reader replays it; the windows held are
				// the live assignment's, and stay.
				return nil
			}
			r.assign(p, a)
		}
		p.settler = s
	}
	if r.gone(p) {
		return nil // on its way when its assignment ended: the next reader replays it
	}
	ev := w.eventTime(&m.Value)
	arr := m.Timestamp
	if arr.IsZero() {
		arr = ev
	}
	p.seen = r.now
	late := func(e *LateError) error {
		e.Partition, e.Offset, e.Event, e.Arrival, e.Lateness, e.MaxAhead = m.Partition, m.Offset, ev, arr, w.lateness, w.maxAhead
		if w.onLate != nil {
			w.onLate(e)
		}
		return r.in.Fail(r.ctx, *m, e)
	}
	if ev.Before(r.minTime) || ev.After(r.maxTime) || arr.Before(r.minTime) || arr.After(r.maxTime) {
		return late(&LateError{Beyond: true, Ahead: ev.After(r.maxTime) || arr.After(r.maxTime)})
	}
	evNs, arrNs := ev.UnixNano(), arr.UnixNano()
	// A rejected message moves no time: a record stamped far ahead by a
	// wrong clock must not close the windows of the others.
	switch {
	case evNs > arrNs+int64(w.maxAhead):
		return late(&LateError{Ahead: true})
	case evNs < arrNs-int64(w.lateness):
		return late(&LateError{})
	}
	if arrNs > p.stream {
		// The windows this arrival closes go out before the message is
		// placed, so that what is late depends on the order of the
		// partition's messages, not on how they were batched.
		p.stream = arrNs
		if limit := arrNs - int64(w.lateness) - int64(w.size); len(p.open) > 0 && p.open[0].start <= limit {
			if err := r.emit(p, func(start int64) bool { return start <= limit }, false); err != nil {
				return err
			}
		}
	}
	size := int64(w.size)
	start := floorDiv(evNs, size) * size
	if p.anyClose && start+size <= p.closed {
		return late(&LateError{Closed: time.Unix(0, p.closed)})
	}
	var win *openWindow[K, A]
	for i := len(p.open) - 1; i >= 0; i-- {
		if p.open[i].start == start {
			win = p.open[i]
			break
		}
	}
	if win == nil {
		keys, handles := p.keysHint, p.handlesHint
		if len(p.open) > 0 {
			newest := p.open[len(p.open)-1]
			keys, handles = max(keys, len(newest.panes)), max(handles, len(newest.handles))
		}
		win = &openWindow[K, A]{start: start, index: make(map[K]int, keys),
			panes: make([]Pane[K, A], 0, keys), handles: make([]stream.Handle, 0, handles)}
		at, _ := slices.BinarySearchFunc(p.open, start, func(o *openWindow[K, A], s int64) int { return cmp.Compare(o.start, s) })
		p.open = slices.Insert(p.open, at, win) // oldest first
	}
	k, i, ok := h.key, h.pane, h.win == win && h.pane >= 0
	if !h.keyed {
		k = w.key(m)
	}
	if !ok {
		i, ok = win.index[k]
	}
	if !ok {
		i = len(win.panes)
		win.panes = append(win.panes, Pane[K, A]{Key: k})
		win.index[k] = i
	}
	pane := &win.panes[i]
	w.add(&pane.Value, &m.Value) // before any count: a panic here leaves the message out
	if pane.Count == 0 || m.Offset < pane.FirstOffset {
		pane.FirstOffset = m.Offset
	}
	pane.Count++
	if win.n == 0 || m.Offset < win.first {
		win.first = m.Offset
	}
	win.n++
	if !m.Handle().IsZero() {
		win.handles = append(win.handles, m.Handle())
	}
	if r.tracer != nil {
		win.trace.placed(&m.Envelope, r.now)
	}
	return nil
}
