package flow

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Tumbling returns a flow that aggregates messages per key into tumbling
// windows of event time, size long, one set of windows per source
// partition, and emits them when they close: what a sink needs to write
// one aggregate per key and window, and settle the messages only once it
// is written.
//
// A message goes into the window [start, start+size) holding
// eventTime(&m.Value), under key(&m); add folds its value into the
// aggregate of that key and window (the zero A to begin). Nothing is
// settled here: the messages of a window are settled when the Windows
// message that carries them is, so a crash before the aggregate is written
// replays them, and a source commits past a message only after its window
// was written.
//
// Time. A message's arrival is its Envelope.Timestamp (the Kafka record's
// timestamp: the producer's clock, or the broker's with the topic's
// message.timestamp.type=LogAppendTime), or its event time if the source
// gives none. A partition's stream time is the latest arrival of a
// message it accepted (a rejected one moves no time: one record stamped
// an hour ahead is failed alone), and its windows close when the stream
// time reaches their end plus the allowed lateness (Lateness; default the
// window size). Then every window of the partition with that start is
// emitted as one Windows message.
//
// Late and early messages are failed (routed to the failure stream, a
// dead letter) with a *LateError, never dropped silently:
//   - a message whose event time is more than the lateness before its
//     arrival (it reached the stream too late, however the others came);
//   - a message for a window of its partition already emitted;
//   - a message whose event time is more than MaxAhead (default size)
//     after its arrival: a clock far ahead would otherwise hold a window,
//     and every offset after its message, open for as long;
//   - a time a nanosecond count cannot hold (before 1678, after 2261).
//
// With timestamps that do not decrease within a partition (one producer,
// or the broker's log-append time), the first rule makes every decision a
// property of the record alone, so a replay from any checkpoint rebuilds
// exactly the windows that start after it. A window that began before the
// replay's start is rebuilt partially: Windows.FirstOffset and
// Pane.FirstOffset let a writer keep the aggregate that began earlier
// (see Pane).
//
// Idle partitions. A partition that receives nothing for IdleClose
// (default size + lateness, in processing time) has all its windows
// emitted, Early; messages of those windows that come later fail as late.
// So a reader that stalls (a broker outage, a paused process) while the
// producers go on must not count as idle: give IdleWhen whether the
// source has sent every record the broker holds for the partition
// (source/kafka's Unsent; its PartitionStats.Unread, as of the last
// fetch, misses records the source holds behind a slow pipeline), and
// give IdleWhenHeld whether the messages the window holds are all the
// source has unsettled (records already sent may still be on their way
// to the window, behind other partitions' or while the window waited for
// its output). At the end of the input all
// windows are emitted too, unless the pipeline is draining (its context
// was cancelled): then they are left unsettled, to be rebuilt from the
// checkpoint by the next reader. A window left open is what keeps its
// messages, and every later offset of the partition, uncommitted; a
// source that stops fetching a partition once it has many unsettled
// messages (source/kafka's MaxUnsettledPerPartition, resuming at half of
// it) must resume with a window and its lateness of them open, or the
// partition waits for the idle close.
//
// Reassignment. A partition's windows hold the messages of one
// assignment of it (stream.Handle.Assignment: the Kafka sources give each
// its own): a pane counts a run of the partition's offsets as one reader
// read them, which is what Pane's rule needs to judge it. When a message
// of another assignment of the partition comes (the partition was taken
// away and given back, and the new assignment replays from a checkpoint,
// perhaps another owner's and past every offset this one saw), and as
// soon as an assignment ends (stream.Assignment.Ended: the partition was
// revoked, lost or stopped here), the windows still open from the old
// one are dropped: not emitted, and left unsettled, since the source
// ignores settles addressed to an old assignment and whoever reads the
// partition now replays those messages. Messages of an assignment that
// has ended, still on their way when it ended, are dropped the same way.
// Windows already emitted are not recalled. Stages before this one may
// give messages handles of their own (FlatMap, Batch,
// backpressure.PartitionLimit): the assignment is that of the handles they
// split, join or wrap (stream.Wrapper). Messages from a source without
// assignments (a nil Assignment) all belong to one.
//
// Panics in key, eventTime or add fail the message being added; a panic
// in IdleWhen keeps the partition's windows open. key must depend on the
// message alone: to overlap the cache misses of a batch's messages, it
// may be called for each message of a batch before the first is added
// (and so also for a message that then fails as late), and is called
// again where the message is added if it panicked then.
func Tumbling[T any, K comparable, A any](size time.Duration, key func(*stream.Message[T]) K,
	eventTime func(*T) time.Time, add func(acc *A, v *T), opts ...WindowOption) stream.Flow[T, Windows[K, A]] {
	w := &tumbling[T, K, A]{size: size, key: key, eventTime: eventTime, add: add}
	for _, o := range opts {
		o(&w.windowConfig)
	}
	return w
}

// WindowOption configures Tumbling.
type WindowOption func(*windowConfig)

type windowConfig struct {
	lateness, maxAhead, idle   time.Duration
	lateSet, aheadSet, idleSet bool
	onLate                     func(*LateError)
	idleWhen                   func(topic string, partition int32) bool
	idleWhenHeld               func(topic string, partition int32, held int) bool
}

// Lateness is how long after its event time a message may arrive, and so
// how long after a window's end, in stream time, the window stays open
// (default the window size).
func Lateness(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.lateness, c.lateSet = d, true }
}

// MaxAhead is how far after its arrival a message's event time may be
// (default the window size).
func MaxAhead(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.maxAhead, c.aheadSet = d, true }
}

// IdleClose is how long a partition may receive nothing, in processing
// time, before its open windows are emitted anyway (default size +
// lateness).
func IdleClose(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.idle, c.idleSet = d, true }
}

// IdleWhen, if set, lets IdleClose emit a partition's windows only when
// it returns true for the partition: give it whether the source has read
// the partition to its end and hears from its broker. Without it a reader
// that stalls longer than IdleClose (a broker outage, a paused process)
// while the partition's producers go on emits the open windows early, and
// their readings that come after are failed as late.
func IdleWhen(fn func(topic string, partition int32) bool) WindowOption {
	return func(c *windowConfig) { c.idleWhen = fn }
}

// IdleWhenHeld is IdleWhen told, too, how many messages of the partition
// the window holds in its open windows. A source's unsent count cannot
// see messages already sent and still on their way to the window (in the
// pipes before it, behind other partitions' backlog, or waiting while
// the window itself waited to hand on its output): their partition
// looks quiet to the window and read to its end to the source. Comparing
// held with the partition's unsettled messages at the source
// (source/kafka's PartitionStats.Unsettled) tells: they are equal only
// when nothing of the partition is on its way (nor being written or
// dead-lettered). With both options set, both must return true.
func IdleWhenHeld(fn func(topic string, partition int32, held int) bool) WindowOption {
	return func(c *windowConfig) { c.idleWhenHeld = fn }
}

// OnLate, if set, is called with every late or early message's error
// before the message is failed (counters, tests).
func OnLate(fn func(*LateError)) WindowOption { return func(c *windowConfig) { c.onLate = fn } }

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

type tumbling[T any, K comparable, A any] struct {
	windowConfig
	size      time.Duration
	key       func(*stream.Message[T]) K
	eventTime func(*T) time.Time
	add       func(*A, *T)
}

func (w *tumbling[T, K, A]) Name() string { return "window" }

func (w *tumbling[T, K, A]) Validate() error {
	bad := func(arg, reason string, v any) error {
		return &stream.ConfigError{Stage: "window", Argument: arg, Reason: fmt.Sprintf(reason, v)}
	}
	switch {
	case w.size <= 0:
		return bad("size", "must be positive, got %v", w.size)
	case w.key == nil:
		return stage.NilArg("window", "key")
	case w.eventTime == nil:
		return stage.NilArg("window", "eventTime")
	case w.add == nil:
		return stage.NilArg("window", "add")
	case w.lateness < 0:
		return bad("lateness", "must not be negative, got %v", w.lateness)
	case w.maxAhead < 0:
		return bad("maxAhead", "must not be negative, got %v", w.maxAhead)
	case w.idle < 0:
		return bad("idleClose", "must not be negative, got %v", w.idle)
	case w.size > maxSpan || w.lateness > maxSpan || w.maxAhead > maxSpan || w.size+w.lateness+w.maxAhead > maxSpan:
		return bad("size", "with the lateness and MaxAhead must total at most 100 years, got %v", w.size+w.lateness+w.maxAhead)
	}
	return nil
}

func (w *tumbling[T, K, A]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[Windows[K, A]]) error {
	if !w.lateSet {
		w.lateness = w.size
	}
	if !w.aheadSet {
		w.maxAhead = w.size
	}
	if !w.idleSet {
		w.idle = w.size + w.lateness
	}
	wctx, stopWatching := context.WithCancel(ctx)
	r := &windowRun[T, K, A]{w: w, parts: map[partKey]*partWindows[K, A]{}, ctx: ctx, in: in, out: out,
		ended: make(chan endNote), wctx: wctx}
	defer func() {
		stopWatching()
		r.watchers.Wait()
	}()
	r.minTime, r.maxTime = w.timeRange()
	var tick <-chan time.Time
	if w.idle > 0 {
		t := time.NewTicker(max(w.idle/4, time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case b, ok := <-in.C():
			if !ok {
				select {
				case <-in.Draining():
					// The pipeline is stopping, not the input ending: open
					// windows are left unsettled for whoever reads the
					// partition next. Written now, they would be committed
					// without the rest of their minute.
					return nil
				default:
					return r.closeAll()
				}
			}
			in.Received(b)
			r.now = time.Now()
			r.touch(b.Items)
			err := stage.Each(ctx, in, b.Items, r.one)
			r.doneBatch()
			b.Release()
			if err == nil {
				err = in.FlushOutputs(ctx) // failures (late messages) too
			}
			if err != nil {
				return err
			}
		case now := <-tick:
			if err := r.closeIdle(now); err != nil {
				return err
			}
		case e := <-r.ended:
			if p := r.parts[e.key]; p != nil && p.assignment == e.a {
				r.forget(p)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxSpan bounds size + lateness + maxAhead, so that the times windows
// are computed in (nanosecond counts) keep room for their arithmetic.
const maxSpan = 100 * 365 * 24 * time.Hour

// timeRange returns the event times and arrivals the windows can take:
// those a nanosecond count holds, less twice the span of a window, its
// lateness and how far ahead a message may be at either end, so that a
// window's start (rounded down), its end and the closing limit (an
// arrival less the lateness and the size) do not wrap around.
func (w *tumbling[T, K, A]) timeRange() (lo, hi time.Time) {
	margin := 2*int64(w.size+w.lateness+w.maxAhead) + int64(24*time.Hour)
	return time.Unix(0, math.MinInt64+margin), time.Unix(0, math.MaxInt64-margin)
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
	return nil
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
		if err := r.out.Send(r.ctx, m); err != nil {
			return err
		}
	}
	return nil
}
