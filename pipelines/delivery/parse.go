package delivery

import (
	"context"
	"time"

	"github.com/sluice-streams/sluice/internal/stage"
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
// With stats, it records how long each request waited to be read: from
// its record's timestamp to parse, by the level it was read at.
func parse(keep bool, stats *LevelStats) stream.Flow[[]byte, *Progress] {
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
