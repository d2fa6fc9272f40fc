package source

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

// Level is one level of a priority source: its name (a stage name, and
// the level's label) and the source that reads it, typically a Kafka
// source of the level's topic.
type Level[T any] struct {
	Name   string
	Source stream.Source[T]
}

// Priority merges one source per level of priority into one stream, served
// in the order policy p says (backpressure.StrictPriority,
// WeightedPriority, with Aging): levels[0] is the highest. Each message
// leaves tagged with its level (Envelope.Priority).
//
// Each level's source runs as its own stage, named after the level, and
// feeds a pipe of its own; the "priority" stage takes from those pipes by
// the policy. So backpressure goes back per level: when downstream is
// full, the stage takes nothing, and when it has room it takes the levels
// the policy prefers, so the pipes of the others stay full and their
// sources stop reading first. A level whose source ends leaves the others
// going; one that fails stops the pipeline with its stage named.
//
// Levels whose source is Pausable (a Kafka source) are also held back at
// the broker, so that a higher level is fetched sooner, not only served
// sooner from memory. Every 20 ms the stage looks at its levels: a level
// presses when its pipe holds messages waiting or its source, a Lagger,
// reports lag. Level l is paused while some level above it presses and
// its own pipe is at least half full; it is resumed when no level above
// presses or its pipe is less than half full. So a paused level is never
// starved of what it already holds (weighted shares and aging still
// serve it), and it fetches again while it still has half a pipe to
// serve, so that its share does not wait for the resume and its next
// messages arrive and age. Level 0 is never paused; every level is
// resumed when the stage ends. Under strict priority a pressing higher
// level keeps the lower pipes full, so they stay paused until it drains.
//
// An aging policy measures a message's wait from when the stage took its
// batch from its level's pipe, or from its Timestamp where that is when
// the broker appended it (Envelope.AppendTime: a Kafka topic with
// LogAppendTime), so that a backlog at the broker ages. A timestamp a
// producer chose (Kafka's CreateTime) is not used: a producer whose clock
// is behind, or a backfill of old data, would make fresh messages look
// old and they would jump the queue (see backpressure.WaitStart).
//
// Bad arguments (no levels, an invalid policy, a policy of another number
// of levels, a level without a source, two levels whose sources,
// TopicListers, read the same topic) are reported by Run as
// *stream.ConfigError naming the argument.
func Priority[T any](g *stream.Graph, p backpressure.Priority, levels []Level[T], opts ...stream.StageOption) stream.Stream[T] {
	st := stream.NewStage(g, "priority")
	if err := p.Validate(); err != nil {
		st.Invalid("policy", err.Error())
	}
	switch {
	case len(levels) == 0:
		st.Invalid("levels", "need at least one level")
	case len(levels) != p.Levels() && p.Levels() > 0:
		st.Invalid("levels", fmt.Sprintf("%d levels for a policy of %d", len(levels), p.Levels()))
	case len(levels) > backpressure.MaxLevels:
		st.Invalid("levels", fmt.Sprintf("at most %d levels, got %d", backpressure.MaxLevels, len(levels)))
	}
	sharedTopics(st, levels)
	ins := make([]*stream.Inlet[T], len(levels))
	srcs := make([]any, len(levels))
	for i, l := range levels {
		name := l.Name
		if name == "" {
			name = fmt.Sprintf("priority-%d", i)
		}
		src := l.Source
		if src == nil {
			st.Invalid("levels", fmt.Sprintf("level %d (%s) has no source", i, name))
			src = stream.SourceFunc[T](func(context.Context, *stream.Outlet[T]) error { return nil })
		}
		srcs[i] = src
		ins[i] = stream.Input(st, stream.From(g, src, stream.Name(name)), opts...)
	}
	out, s := stream.Output[T](st)
	ps := &priorityStats{levels: make([]levelCounter, len(ins)), queued: make([]func() int64, len(ins)), lag: make([]Lagger, len(ins))}
	for l, in := range ins {
		ps.queued[l] = in.Buffered
		ps.lag[l], _ = srcs[l].(Lagger)
	}
	st.Publish(ps)
	st.Run(func(ctx context.Context) error {
		r := &priorityRun[T]{p: p, ins: ins, out: out, ended: make([]atomic.Bool, len(ins)), stats: ps}
		queued, capacity := make([]func() int, len(ins)), make([]int, len(ins))
		for l, in := range ins {
			queued[l], capacity[l] = func() int { return len(in.C()) }, cap(in.C())
		}
		if pz := newLevelPauser(srcs, queued, capacity, r.ended, ps.levels); pz != nil {
			defer pz.start()()
		}
		return r.run(ctx)
	})
	return s
}

// sharedTopics reports two levels whose sources read the same topic.
func sharedTopics[T any](st *stream.StageBuilder, levels []Level[T]) {
	reader := map[string]int{}
	for i, l := range levels {
		tl, ok := l.Source.(TopicLister)
		if !ok {
			continue
		}
		for _, t := range tl.Topics() {
			if j, seen := reader[t]; seen && j != i {
				st.Invalid("levels", fmt.Sprintf("levels %d (%s) and %d (%s) both read topic %q", j, levels[j].Name, i, l.Name, t))
				continue
			}
			reader[t] = i
		}
	}
}

// priorityRun is the priority stage at work: the batch at the head of each
// level's pipe, and the picker.
type priorityRun[T any] struct {
	p   backpressure.Priority
	ins []*stream.Inlet[T]
	out *stream.Outlet[T]

	cur   []*stream.Batch[T] // each level's batch being served, nil if none
	idx   []int              // the next message of cur
	got   []int64            // when cur was received (unix ns; aging only): its messages' wait starts there
	done  []bool             // the level's input has ended
	ended []atomic.Bool      // done, for the level pauser's goroutine
	stats *priorityStats
	since []int64 // for the picker: when each ready head arrived (NotReady: none)
}

func (r *priorityRun[T]) run(ctx context.Context) error {
	n := len(r.ins)
	r.cur, r.idx, r.got, r.done, r.since = make([]*stream.Batch[T], n), make([]int, n), make([]int64, n), make([]bool, n), make([]int64, n)
	defer func() {
		for _, b := range r.cur {
			if b != nil {
				b.Release()
			}
		}
	}()
	pk := r.p.NewPicker()
	aging := pk.Ages()
	strict := !aging && !r.p.Weighted()
	// The clock is read every `every` picks and after every wait: aging is
	// measured in milliseconds, a pick in tens of nanoseconds; and at least
	// once per output batch, since handing a batch on is where the stage
	// waits for downstream.
	every := min(64, r.out.BatchSize())
	var now int64
	for picks := 0; ; picks++ {
		open := r.take(aging)
		if aging && picks%every == 0 {
			now = time.Now().UnixNano()
		}
		ready := false
		for l := range n {
			r.since[l] = backpressure.NotReady
			if r.cur[l] == nil {
				continue
			}
			ready = true
			r.since[l] = 1 // ready; without aging no time is compared
			if aging {
				m := &r.cur[l].Items[r.idx[l]]
				r.since[l] = backpressure.WaitStart(m.Timestamp, m.AppendTime, r.got[l])
			}
		}
		if !ready {
			if open == 0 {
				return nil
			}
			if err := r.wait(ctx, aging); err != nil {
				return err
			}
			picks = -1 // read the clock again
			continue
		}
		l := pk.Pick(r.since, now)
		b := r.cur[l]
		if strict && r.idx[l] == 0 && len(b.Items) <= r.out.BatchSize() {
			// Strict, and nothing above l had a batch when the pipes were
			// last looked at: the whole batch goes on as it is, as a merge
			// would pass it, tagged, in one hand-over (it fits the output's
			// batch; a larger one would be sent message by message, and a
			// higher level arriving meanwhile would wait for all of it).
			for i := range b.Items {
				b.Items[i].Priority = uint8(l)
			}
			r.cur[l] = nil
			r.stats.levels[l].emitted.Add(int64(len(b.Items)))
			if err := r.out.SendBatch(ctx, b); err != nil {
				return err
			}
			continue
		}
		slot := r.out.Slot()
		*slot = b.Items[r.idx[l]]
		slot.Priority = uint8(l)
		var zero stream.Message[T]
		b.Items[r.idx[l]] = zero // the value now belongs downstream
		if r.idx[l]++; r.idx[l] == len(b.Items) {
			b.Release()
			r.cur[l] = nil
		}
		r.stats.levels[l].emitted.Add(1)
		if err := r.out.SendSlot(ctx); err != nil {
			return err
		}
	}
}

// take receives, without waiting, a batch for every level that has none,
// and returns how many levels are still open.
func (r *priorityRun[T]) take(aging bool) int {
	open := 0
	for l, in := range r.ins {
		if r.done[l] {
			continue
		}
		open++
		if r.cur[l] != nil {
			continue
		}
		select {
		case b, ok := <-in.C():
			r.received(l, b, ok, aging)
			if !ok {
				open--
			}
		default:
		}
	}
	return open
}

func (r *priorityRun[T]) received(l int, b *stream.Batch[T], ok, aging bool) {
	if !ok {
		r.done[l] = true
		r.ended[l].Store(true)
		return
	}
	r.ins[l].Received(b)
	r.stats.levels[l].received.Add(int64(len(b.Items)))
	if len(b.Items) == 0 {
		b.Release()
		return
	}
	r.cur[l], r.idx[l] = b, 0
	if aging {
		r.got[l] = time.Now().UnixNano()
	}
}

// wait flushes the output and blocks until a level's pipe has a batch (or
// ends) or ctx ends.
func (r *priorityRun[T]) wait(ctx context.Context, aging bool) error {
	if err := r.ins[0].FlushOutputs(ctx); err != nil {
		return err
	}
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
	levels := []int{-1}
	for l, in := range r.ins {
		if !r.done[l] && r.cur[l] == nil {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.C())})
			levels = append(levels, l)
		}
	}
	i, v, ok := reflect.Select(cases)
	if i == 0 {
		return ctx.Err()
	}
	var b *stream.Batch[T]
	if ok {
		b = v.Interface().(*stream.Batch[T])
	}
	r.received(levels[i], b, ok, aging)
	return nil
}
