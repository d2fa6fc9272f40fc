package flow

import (
	"context"
	"fmt"
	"math"
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
		ended: make(chan endNote), wctx: wctx, tracer: newWindowTracer(in.TracerProvider(), in.Stage())}
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
