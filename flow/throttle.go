package flow

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Throttle returns a flow that passes at most perSecond messages a second,
// with bursts of up to burst, delaying (never dropping) the rest. Because
// it waits instead of reading, a throttle slows its source down through
// backpressure. It uses golang.org/x/time/rate.
func Throttle[T any](perSecond float64, burst int) stream.Flow[T, T] {
	return &throttle[T]{limit: rate.Limit(perSecond), burst: burst}
}

type throttle[T any] struct {
	limit rate.Limit
	burst int
}

func (f *throttle[T]) Name() string { return "throttle" }

func (f *throttle[T]) Validate() error {
	if f.limit <= 0 {
		return &stream.ConfigError{Stage: "throttle", Argument: "perSecond", Reason: fmt.Sprintf("must be positive, got %v", float64(f.limit))}
	}
	if f.burst < 1 {
		return &stream.ConfigError{Stage: "throttle", Argument: "burst", Reason: fmt.Sprintf("must be at least 1, got %d", f.burst)}
	}
	return nil
}

func (f *throttle[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	lim := rate.NewLimiter(f.limit, f.burst)
	return stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		for i := 0; i < len(b.Items); {
			n := min(len(b.Items)-i, f.burst)
			r := lim.ReserveN(time.Now(), n)
			if d := r.Delay(); d > 0 {
				// Let what already passed go on before waiting.
				if err := out.Flush(ctx); err != nil {
					return false, err
				}
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					r.Cancel()
					return false, ctx.Err()
				}
			}
			for _, m := range b.Items[i : i+n] {
				if err := out.Send(ctx, m); err != nil {
					return false, err
				}
			}
			i += n
		}
		return false, nil
	})
}
