package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// node is one stage at run time.
type node struct {
	g           *Graph
	name        string
	source      bool
	failurePath bool
	run         func(ctx context.Context) error
	value       any // the source, flow or sink given to From, Via or To
	outs        []flusher
	ins         []reader
	failOut     *Outlet[Failure]
	failPort    *port[Failure]
	stats       nodeStats
	obs         StageObserver // nil without a pipeline Observer
	log         atomic.Pointer[slog.Logger]
}

type flusher interface {
	Flush(ctx context.Context) error
	discard()
	close()
}

type reader interface {
	done()
	buffered() int64
	capacity() int64
	inputs() []string
}

func (o *Outlet[T]) close() { o.p.writerDone() }

type nodeStats struct {
	in, out, settled, failed atomic.Int64
	byOutcome                [DeadLettered + 1]atomic.Int64
	blocked                  atomic.Int64 // ns spent waiting on a full downstream pipe
}

func (n *node) flush(ctx context.Context) error {
	for _, o := range n.outs {
		if err := o.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) fail(ctx context.Context, v any, m Message[Failure], f Failure) error {
	err := f.Err
	if IsFatal(err) {
		return err
	}
	if n.failOut == nil {
		// A stage on the failure path itself cannot dead-letter: stop, and
		// leave the message unsettled so it is replayed.
		return Fatal(fmt.Errorf("failure of a dead-letter stage: %w", err))
	}
	n.stats.failed.Add(1)
	f.Stage, f.Value = n.name, v
	if f.At.IsZero() {
		f.At = time.Now()
	}
	if f.FirstFailure.IsZero() {
		f.FirstFailure = f.At
	}
	m.Value = f
	return n.failOut.Send(ctx, m)
}

// Run validates the pipeline, starts every stage on its own goroutine and
// waits for all of them to end. It returns nil when every source is
// exhausted and every message has passed through, or when ctx was cancelled
// and the stages drained in time. The first stage error cancels all stages
// and is returned as a *StageError naming the stage; a drain that outlasts
// the drain timeout returns an error wrapping ErrDrainTimeout. No goroutine
// started by Run outlives it.
func (g *Graph) Run(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: a pipeline runs once", ErrInvalid)
	}
	g.mu.Lock()
	err := g.prepare()
	g.mu.Unlock()
	if err != nil {
		return err
	}

	// Sources stop as soon as ctx is cancelled; the other stages keep going
	// until their input ends, a stage fails, or the drain timeout expires.
	srcCtx, cancelSrc := context.WithCancelCause(ctx)
	defer cancelSrc(nil)
	g.draining = srcCtx.Done()
	stageCtx, cancelStages := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelStages(nil)

	var (
		once     sync.Once
		firstErr error
	)
	abort := func(err error) {
		once.Do(func() {
			firstErr = err
			cancelSrc(err)
			cancelStages(err)
		})
	}

	done := make(chan struct{})
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(g.drainTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cancelStages(fmt.Errorf("%w after %v", ErrDrainTimeout, g.drainTimeout))
		}
	}()

	var wg sync.WaitGroup
	for _, n := range g.nodes {
		runCtx := stageCtx
		if n.source {
			runCtx = srcCtx
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.exec(runCtx, stageCtx, abort)
		}()
	}
	wg.Wait()
	close(done)
	<-watcher

	if firstErr != nil {
		return firstErr
	}
	if cause := context.Cause(stageCtx); cause != nil && errors.Is(cause, ErrDrainTimeout) {
		return cause
	}
	return nil
}

// exec runs the stage, then hands on what it built (if it ended well) and
// closes its outputs. A source cancelled by ctx ends well: cancellation is
// how a pipeline is asked to stop.
//
// A stage's own error is reported (abort) before its inputs are marked
// done: the stages feeding it then see the pipeline cancelled, and their
// "downstream has ended" is recognized as an echo, not taken for the cause.
func (n *node) exec(runCtx, stageCtx context.Context, abort func(error)) {
	var err error
	defer func() {
		if r := recover(); r != nil {
			err = NewPanicError(r)
		}
		if err == nil {
			if ferr := n.flush(stageCtx); ferr != nil && !isCancel(stageCtx, ferr) {
				err = ferr
			}
		}
		if err != nil && isCancel(stageCtx, err) {
			// The stage saw the cancellation caused by another stage's
			// error or by the drain timeout; that cause is reported, not
			// this echo of it.
			err = nil
		}
		if err != nil {
			abort(&StageError{Stage: n.name, Err: err})
		}
		for _, o := range n.outs {
			if err != nil {
				o.discard()
			}
			o.close()
		}
		for _, in := range n.ins {
			in.done()
		}
	}()
	err = n.run(runCtx)
	if n.source && err != nil && runCtx.Err() != nil && errors.Is(err, runCtx.Err()) && stageCtx.Err() == nil {
		err = nil
	}
}

func isCancel(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrDownstreamClosed))
}

// prepare checks the graph and binds the failure outputs.
func (g *Graph) prepare() error {
	var errs []error
	errs = append(errs, g.errs...)
	for _, n := range g.nodes {
		if n.run == nil {
			errs = append(errs, &ConfigError{Stage: n.name, Argument: "Run", Reason: "stage has no run function"})
		}
	}
	for _, p := range g.ports {
		if !p.isConnected() && !p.isOptional() {
			errs = append(errs, &ConfigError{Stage: strings.Join(p.writerNames(), ", "), Argument: "output",
				Reason: "is not connected to any stage (end it with To)"})
		}
	}
	if len(errs) > 0 {
		// Each error is one line naming its stage and argument; those
		// that are not a ConfigError are marked ErrInvalid too.
		for i, err := range errs {
			if !errors.Is(err, ErrInvalid) {
				errs[i] = fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		return errors.Join(errs...)
	}
	if len(g.nodes) == 0 {
		return fmt.Errorf("%w: pipeline has no stages", ErrInvalid)
	}

	// Route each unconnected failure output to the pipeline's failures.
	for _, n := range g.nodes {
		if n.failPort == nil || n.failPort.connected {
			continue
		}
		if n.failurePath {
			n.failOut = nil
			continue
		}
		g.failures.addOutlet(n.failOut)
	}
	if !g.failures.connected && len(g.failures.outlets) > 0 {
		To(g.Failures(), Sink[Failure](&logDeadLetter{logger: g.logger}), Name("dead-letter"))
	}
	g.observer = teeObservers(g.observers)
	if to, ok := g.observer.(TraceObserver); ok && g.tracer != nil {
		g.traceObs = to
	}
	if g.observer != nil {
		for _, n := range g.nodes {
			n.obs = g.observer.Stage(n.name)
		}
	}
	// A pipe nobody writes to is at its end from the start.
	for _, p := range g.pipes {
		p.closeIfUnwritten()
	}
	return nil
}

// tracer returns the pipeline's tracer provider, nil when tracing is off
// or the port belongs to no pipeline.
func (n *node) tracer() trace.TracerProvider {
	if n == nil {
		return nil
	}
	return n.g.tracer
}

// logger returns the pipeline's logger with the stage's name, made once.
func (n *node) logger() *slog.Logger {
	if l := n.log.Load(); l != nil {
		return l
	}
	l := n.g.logger.With("stage", n.name)
	n.log.Store(l)
	return l
}
