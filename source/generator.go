package source

import (
	"context"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Generator returns a source that emits fn(0), fn(1), ... with Offset set to
// the sequence number, optionally rate limited (Rate) and bounded (Count).
// It runs until Count is reached or the pipeline is cancelled. It takes
// GeneratorOptions: Rate, Count, and any Option (Track).
func Generator[T any](fn func(seq int64) T, opts ...GeneratorOption) stream.Source[T] {
	return &generator[T]{fn: fn, c: newConfig("generator", opts)}
}

type generator[T any] struct {
	fn func(seq int64) T
	c  config
}

func (g *generator[T]) Name() string { return "generator" }

func (g *generator[T]) Validate() error {
	if g.fn == nil {
		return &stream.ConfigError{Stage: "generator", Argument: "fn", Reason: "must not be nil"}
	}
	return g.c.validate()
}

func (g *generator[T]) Run(ctx context.Context, out *stream.Outlet[T]) error {
	var lim *rate.Limiter
	if g.c.limit != rate.Inf {
		lim = rate.NewLimiter(g.c.limit, g.c.burst)
	}
	var seq int64
	for g.c.count < 0 || seq < g.c.count {
		n := int64(out.BatchSize())
		if g.c.count >= 0 {
			n = min(n, g.c.count-seq)
		}
		if lim != nil {
			n = min(n, int64(g.c.burst))
			r := lim.ReserveN(time.Now(), int(n))
			if d := r.Delay(); d > 0 {
				// Hand on what we have, then wait for the tokens.
				if err := out.Flush(ctx); err != nil {
					return err
				}
				if err := stage.Sleep(ctx, d); err != nil {
					r.Cancel()
					return err
				}
			}
		}
		now := time.Now()
		for range n {
			h, off := g.c.handle(seq)
			m := stream.NewMessage(g.fn(seq), h)
			m.Offset = off
			m.Timestamp = now
			seq++
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
