package flow

import (
	"context"
	"fmt"
	"sync"
	"time"

	streams "github.com/reugn/go-streams"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// GoStreams runs a reugn/go-streams flow (its windows, Throttler, Keyed,
// Map, Filter, ...) as a stage of a sluice pipeline: each input value is
// sent to f.In() and each element f emits must be an Out.
//
// Settling across the bridge: go-streams does not say which inputs an
// output came from, so an output carries the handles of every input handed
// to f before it and not yet carried by an earlier output; inputs left when
// f ends are settled as stream.Filtered. For operators that emit in input
// order (windows, Throttler, Map/Filter with parallelism 1) a message is
// therefore settled only after an output that includes it is settled, and
// at-least-once holds. For operators that reorder (parallelism > 1) an
// input may be settled before its own output: use sluice's stages there.
//
// Outputs carry a fresh envelope (its Timestamp is the emission time). An
// output of the wrong type ends the pipeline with an error naming the type.
// The go-streams flow is started by its constructor and ended by closing
// its input, which this stage does when its own input ends or the pipeline
// stops, so a flow value must be used in one pipeline only.
func GoStreams[In, Out any](f streams.Flow) stream.Flow[In, Out] {
	return &goStreamsFlow[In, Out]{f: f}
}

type goStreamsFlow[In, Out any] struct {
	f streams.Flow
}

func (g *goStreamsFlow[In, Out]) Name() string { return "gostreams" }

func (g *goStreamsFlow[In, Out]) Validate() error {
	if g.f == nil {
		return stage.NilArg("gostreams", "f")
	}
	return nil
}

func (g *goStreamsFlow[In, Out]) Run(ctx context.Context, in *stream.Inlet[In], out *stream.Outlet[Out]) error {
	var (
		mu      sync.Mutex
		pending []stream.Handle
	)
	take := func() stream.Handle {
		mu.Lock()
		defer mu.Unlock()
		h := stream.Join(pending)
		pending = pending[:0]
		return h
	}
	emitted := make(chan error, 1)
	go func() { emitted <- g.emit(ctx, out, take) }()

	feedErr := g.feed(ctx, in, func(h stream.Handle) {
		mu.Lock()
		pending = append(pending, h)
		mu.Unlock()
	})
	close(g.f.In())
	emitErr := <-emitted
	if feedErr != nil {
		return feedErr
	}
	if emitErr != nil {
		return emitErr
	}
	// f has ended: inputs that no output carried produced none.
	take().Settle(stream.Filtered)
	return nil
}

// feed sends input values to f. A handle is recorded after its value was
// sent, so it can only be carried by an output emitted after the value
// entered f: never earlier than the output it contributed to.
func (g *goStreamsFlow[In, Out]) feed(ctx context.Context, in *stream.Inlet[In], record func(stream.Handle)) error {
	for {
		var b *stream.Batch[In]
		select {
		case got, ok := <-in.C():
			if !ok {
				return nil
			}
			b = got
		case <-ctx.Done():
			return ctx.Err()
		}
		in.Received(b)
		for i := range b.Items {
			select {
			case g.f.In() <- b.Items[i].Value:
				record(b.Items[i].Handle())
			case <-ctx.Done():
				b.Release()
				return ctx.Err()
			}
		}
		b.Release()
	}
}

// emit moves f's outputs to out until f closes its output. After an error
// it keeps draining f so that f's goroutines can end.
func (g *goStreamsFlow[In, Out]) emit(ctx context.Context, out *stream.Outlet[Out], take func() stream.Handle) error {
	var err error
	for {
		var (
			v  any
			ok bool
		)
		select {
		case v, ok = <-g.f.Out():
		default:
			if err == nil {
				err = out.Flush(ctx)
			}
			v, ok = <-g.f.Out()
		}
		if !ok {
			return err
		}
		if err != nil {
			continue
		}
		val, isOut := v.(Out)
		if !isOut {
			var zero Out
			err = stream.Fatal(fmt.Errorf("go-streams flow emitted %T, want %T", v, zero))
			continue
		}
		m := stream.Message[Out]{Value: val}
		m.Timestamp = time.Now()
		m.SetHandle(take())
		err = out.Send(ctx, m)
	}
}
