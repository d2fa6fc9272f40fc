package sensors

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// MaxClockAhead is how far after the worker's clock a record's timestamp
// (or, without one, its reading's event time) may be: further, the
// producer's clock is wrong and the reading is dead-lettered as malformed.
// The window takes the latest timestamp of a partition as its stream
// time, so one record an hour ahead would otherwise close the minutes
// being read, and every minute after them would wait for the idle close
// for that hour, their on-time readings dead-lettered as late.
const MaxClockAhead = WindowSize

func (w *Worker) parse(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[Reading]) error {
	return stage.ForEach(ctx, in, func(m *stream.Message[[]byte]) error {
		r, err := Parse(m.Key, m.Value)
		if err == nil {
			err = aheadOfClock(m.Timestamp, &r, time.Now())
		}
		if err != nil {
			w.malformed.Add(1)
			return in.Fail(ctx, *m, err)
		}
		w.parsed.Add(1)
		return out.Send(ctx, stream.WithValue(*m, r))
	})
}

// aheadOfClock returns why a reading arrived after now, or nil: the
// window's arrival is the record's timestamp, or the event time without
// one.
func aheadOfClock(ts time.Time, r *Reading, now time.Time) error {
	what, at := "the record's timestamp", ts
	if ts.IsZero() {
		what, at = "event time", r.EventTime()
	}
	if d := at.Sub(now); d > MaxClockAhead {
		return &ParseError{Reason: fmt.Sprintf("%s %s is %v ahead of the worker's clock (more than the %v allowed): the producer's clock is wrong",
			what, at.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), MaxClockAhead)}
	}
	return nil
}
