package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/internal/stage"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// parse is the stage that parses and validates each record into a
// *Progress and sets the level its first steps serve it at: the request's
// own priority if it has one; else, with keep, the level it came with
// (its topic's, from source.Priority), or without keep Normal (one topic
// for all levels: the tier decides after check_account). A record that
// is malformed or invalid (an out-of-range priority included) fails as
// it came, to be dead-lettered with its reason.
//
// With resume (the replays, read from the park topic, only), a record's
// steps done (HeaderParkedProgress, as its parking wrote them) are restored:
// the steps skip them. A request from any other source starts from its
// first step whatever its headers say: a producer's header is no proof
// that a step was done.
//
// With stats, it records how long each request waited to be read: from
// its record's timestamp to parse, by the level it was read at.
func parse(keep, resume bool, stats *LevelStats) stream.Flow[[]byte, *Progress] {
	return stream.FlowFunc[[]byte, *Progress](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[*Progress]) error {
		return stage.Loop(ctx, in, func(b *stream.Batch[[]byte]) (bool, error) {
			if stats != nil {
				stats.read(b.Items, time.Now())
			}
			return false, stage.Each(ctx, in, b.Items, func(m *stream.Message[[]byte]) error {
				r, err := Parse(m.Value)
				if err == nil {
					err = r.Validate()
				}
				if err != nil {
					return in.Fail(ctx, *m, err)
				}
				// Room for every step: recording one never allocates.
				p := stream.WithValue(*m, &Progress{Request: r, Done: make([]Step, 0, len(Steps)), Raw: m.Value})
				if resume {
					p.Value.replayed = true
					resumeProgress(p.Value, m.Header(HeaderParkedProgress))
				}
				switch {
				case r.Priority != nil:
					p.Priority = uint8(*r.Priority)
				case !keep:
					p.Priority = Normal
				}
				return out.Send(ctx, p)
			})
		})
	})
}

// fitReserve scales the reservations down, if they add up to more than
// the parallelism, so that they fit (flow.Lanes refuses more).
func fitReserve(reserve []int, parallelism int) []int {
	sum := 0
	for _, r := range reserve {
		sum += r
	}
	if sum <= parallelism {
		return reserve
	}
	out := make([]int, len(reserve))
	for i, r := range reserve {
		out[i] = r * parallelism / sum
	}
	return out
}

// lateReplays fails a replay, read from the park topic, that came back
// after its deadline: the judge parks a request only while its replay can
// complete in time, but a replay may be read late: the scheduler was
// down, or behind on the park topic.
// Such a replay fails (ErrDeadline, for good) before its first step — no
// call is made, and no breaker counts it — and is compensated, rather than
// scheduled late. One back before its deadline goes on, however little
// time is left: its steps may be quick, and a failure now is judged by
// the deadline as any other.
type lateReplays struct {
	horizon time.Duration
	now     func() time.Time
}

// stage is the replay path's stage that fails the replays too late.
func (l *lateReplays) stage() stream.Flow[*Progress, *Progress] {
	return stream.FlowFunc[*Progress, *Progress](func(ctx context.Context, in *stream.Inlet[*Progress], out *stream.Outlet[*Progress]) error {
		return stage.Loop(ctx, in, func(b *stream.Batch[*Progress]) (bool, error) {
			return false, stage.Each(ctx, in, b.Items, func(m *stream.Message[*Progress]) error {
				if err := l.check(&m.Envelope, m.Value.Request); err != nil {
					return in.Fail(ctx, *m, err)
				}
				return out.Send(ctx, *m)
			})
		})
	})
}

// check returns the failure of a replay past its deadline: its own, or,
// without one, DefaultHorizon after its first failure.
func (l *lateReplays) check(e *stream.Envelope, r Request) error {
	deadline := r.Deadline
	if !deadline.After(time.Unix(0, 0)) {
		first := kafkasink.FirstFailure(e)
		if first.IsZero() {
			return nil // no first failure said: the horizon cannot be placed
		}
		deadline = first.Add(l.horizon)
	}
	if now := l.now(); now.After(deadline) {
		return fmt.Errorf("%w (%s): replayed at %s, too late; it was parked for: %s", ErrDeadline,
			deadline.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), e.Header(kafkasink.HeaderReason))
	}
	return nil
}
