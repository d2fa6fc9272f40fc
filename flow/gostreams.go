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

// GoStreams runs a reugn/go-streams (v0.13.0) operator as a stage of a
// sluice pipeline: each input value is sent to f.In() and each element f
// emits must be an Out.
//
// go-streams does not say which inputs an output came from, so the stage
// counts: it queues the settle handles of the inputs handed to f, in input
// order, and each output carries as many of them as it consumed, settled
// when the output is. An input is thus settled only after the output
// computed from it, which holds only for operators that emit in input order
// and whose outputs consume a known number of inputs. And go-streams runs
// an operator's functions on goroutines of its own, where a panic cannot
// be recovered: it would end the process, not fail one message. So
// GoStreams accepts the operators that call no function of yours and keep
// that order:
//
//   - PassThrough, and Throttler in Backpressure mode: one output per
//     input.
//   - Batch, TumblingWindow and SessionWindow: an output is the slice of
//     exactly the inputs it consumed, in order.
//
// It refuses the others with a *stream.ConfigError, which Run reports
// (wrapping stream.ErrInvalid) before any stage starts:
//
//   - Map, Fold, Reduce: a panic in your function would end the process;
//     use this package's Map (a closure keeps a fold's state).
//   - Keyed: outputs of different keys interleave, so the stage cannot tell
//     which inputs an output covers.
//   - SlidingWindow: one input is in several windows.
//   - Filter and FlatMap: an input may produce no or several outputs; use
//     this package's Filter and FlatMap.
//   - Throttler in Discard mode: it drops inputs; use Throttle.
//   - Any other streams.Flow, including your own: the stage cannot know what
//     its outputs consume.
//
// Operators are recognised by their go-streams v0.13.0 type names and, for
// Throttler, its unexported mode field: if an upgrade renames these, the
// operators are refused until the bridge follows.
//
// Inputs left when f has ended without error produced no output and are
// settled as stream.Filtered (none are, with the operators above). After an
// error, inputs whose outputs were not handed on
// stay unsettled and are replayed. Outputs carry a fresh envelope (its
// Timestamp is the emission time). An output of the wrong type ends the
// pipeline with a stream.Fatal error naming the types.
//
// GoStreams takes f over, so a flow value belongs to one stage of one
// pipeline. A go-streams operator starts its goroutines in its constructor
// and ends them once its input is closed: the stage closes f's input when
// its own input ends, the pipeline stops or the stage fails, and GoStreams
// closes a refused f at once. If the stage never runs (Run is not called, or reports another
// stage's configuration error), f is left running. A Throttler is read
// through its Via, the only path on which it throttles.
func GoStreams[In, Out any](f streams.Flow) stream.Flow[In, Out] {
	g := &goStreamsFlow[In, Out]{f: f}
	if isNil(f) {
		g.err = stage.NilArg("gostreams", "f")
		return g
	}
	g.consumes, g.err = inspect(f)
	if g.err != nil {
		release(f)
	}
	return g
}

type goStreamsFlow[In, Out any] struct {
	f        streams.Flow
	consumes func(out any) int // how many inputs an output of f consumed
	err      error             // why f is refused
}

func (g *goStreamsFlow[In, Out]) Name() string { return "gostreams" }

func (g *goStreamsFlow[In, Out]) Validate() error { return g.err }

func (g *goStreamsFlow[In, Out]) Run(ctx context.Context, in *stream.Inlet[In], out *stream.Outlet[Out]) error {
	var q inflight
	fOut := outputs(g.f)
	// An output that cannot be handed on ends the stage, so feeding stops
	// too: the stage returns only once f has ended, and an input that never
	// ends would otherwise hold the error back for good.
	feedCtx, stopFeed := context.WithCancelCause(ctx)
	defer stopFeed(nil)
	emitted := make(chan error, 1)
	go func() { emitted <- g.emit(ctx, fOut, out, &q, stopFeed) }()

	feedErr := g.feed(feedCtx, in, &q)
	close(g.f.In())
	emitErr := <-emitted
	if emitErr != nil {
		return emitErr
	}
	if feedErr != nil {
		return feedErr
	}
	// f has ended: inputs that no output consumed produced none.
	q.rest().Settle(stream.Filtered)
	return nil
}

// feed sends input values to f. Each handle is queued before its value is
// sent, so it is in the queue before any output that consumed the value
// can be emitted.
func (g *goStreamsFlow[In, Out]) feed(ctx context.Context, in *stream.Inlet[In], q *inflight) error {
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
			q.push(b.Items[i].Handle())
			select {
			case g.f.In() <- b.Items[i].Value:
			case <-ctx.Done():
				// Not sent: no output can consume it, and it stays
				// unsettled to be replayed.
				q.dropLast()
				b.Release()
				return ctx.Err()
			}
		}
		b.Release()
	}
}

// emit moves f's outputs to out until f closes its output. On its first
// error it calls stop, then keeps draining f so that f's goroutines can end.
func (g *goStreamsFlow[In, Out]) emit(ctx context.Context, fOut <-chan any, out *stream.Outlet[Out], q *inflight,
	stop context.CancelCauseFunc) error {
	var err error
	fail := func(e error) {
		if e != nil && err == nil {
			err = e
			stop(e)
		}
	}
	for {
		var (
			v  any
			ok bool
		)
		select {
		case v, ok = <-fOut:
		default:
			if err == nil {
				fail(out.Flush(ctx))
			}
			v, ok = <-fOut
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
			fail(stream.Fatal(fmt.Errorf("go-streams flow emitted %T, want %T", v, zero)))
			continue
		}
		n := g.consumes(v)
		h, popped := q.pop(n)
		if !popped {
			// Impossible for the operators GoStreams accepts; better to stop
			// than to settle the wrong inputs.
			fail(stream.Fatal(fmt.Errorf("go-streams %T emitted an output consuming %d inputs, %d are pending",
				g.f, n, q.len())))
			continue
		}
		m := stream.Message[Out]{Value: val}
		m.Timestamp = time.Now()
		m.SetHandle(h)
		fail(out.Send(ctx, m))
	}
}

// inflight queues the handles of the inputs handed to f whose outputs have
// not been emitted yet, in input order. The feed goroutine pushes, the emit
// goroutine pops.
type inflight struct {
	mu sync.Mutex
	hs []stream.Handle
}

func (q *inflight) push(h stream.Handle) {
	q.mu.Lock()
	q.hs = append(q.hs, h)
	q.mu.Unlock()
}

// dropLast removes the handle pushed last, whose value was never sent.
func (q *inflight) dropLast() {
	q.mu.Lock()
	q.hs[len(q.hs)-1] = stream.Handle{}
	q.hs = q.hs[:len(q.hs)-1]
	q.mu.Unlock()
}

// pop removes the n oldest handles and returns one handle that settles
// them all; false if fewer than n (or n < 1) are queued.
func (q *inflight) pop(n int) (stream.Handle, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n < 1 || n > len(q.hs) {
		return stream.Handle{}, false
	}
	var h stream.Handle
	if n == 1 {
		h = q.hs[0] // the 1:1 operators' path: Join would allocate
	} else {
		h = stream.Join(q.hs[:n])
	}
	clear(q.hs[:n]) // let the settlers of popped handles be collected
	q.hs = q.hs[n:]
	return h, true
}

func (q *inflight) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.hs)
}

// rest removes every queued handle and returns one handle that settles them
// all.
func (q *inflight) rest() stream.Handle {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := stream.Join(q.hs)
	q.hs = nil
	return h
}
