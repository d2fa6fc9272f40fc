package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// SchedulerConfig wires the scheduler to its source, services and topics.
type SchedulerConfig struct {
	// Source reads delivery requests; Committer commits what is settled
	// (a *kafka.Source is both).
	Source    stream.Source[[]byte]
	Committer stream.Committer
	Backends  Backends
	// Producer writes compensation events to FailuresTopic and requests
	// that cannot be processed (malformed, invalid, failed before any step)
	// to DeadLetterTopic.
	Producer                       *kgo.Client
	FailuresTopic, DeadLetterTopic string
	// Parallelism of each step (default 1024: at 50,000 requests/s and
	// 6 ms a call, ~300 calls of each step are in flight).
	Parallelism int
	// Retry is the policy of every step (default: flow.Interactive with 5
	// attempts, which fits the 500 ms latency budget).
	Retry *flow.RetryPolicy
	// Metrics, if set, receives the pipeline's metrics.
	Metrics *observe.Metrics
	// Observer, if set, replaces Metrics.Observer() as the engine's
	// observer (to tee measurements elsewhere too).
	Observer stream.Observer
	Logger   *slog.Logger
	// DrainTimeout bounds the drain on cancel (default 10s).
	DrainTimeout time.Duration
	// Steps, with NonIdempotent, records the completion of the named steps
	// so that a replayed request skips them (for backends that cannot be
	// made idempotent). Default: none; every step relies on PUT semantics.
	Steps         StepStore
	NonIdempotent []Step
	// LatencyTarget is the p99 call latency each step's adaptive
	// concurrency limit holds (default 100 ms: a fifth of the 500 ms
	// budget); the limit stays between a quarter of Parallelism and
	// Parallelism: latency that comes from this process (a collection, a
	// burst's queueing), not the service, should not cut a step to a few
	// calls in flight.
	LatencyTarget time.Duration
}

// Scheduler is a built scheduler pipeline.
type Scheduler struct {
	Graph *stream.Graph
	Steps map[Step]*flow.Async[*Progress, *Progress]
	// Breakers guard each step's service: a service failing half its calls
	// is given a rest instead of a storm of retries.
	Breakers map[Step]*backpressure.Breaker
	// Limits are the steps' adaptive concurrency limits.
	Limits map[Step]*backpressure.Adaptive
}

// NewScheduler builds the pipeline:
//
//	kafka -> parse -> validate -> check_account -> create_package
//	      -> check_third_party -> schedule_drone -> create_delivery -> checkpoint
//	failures: with steps done -> compensation events; else -> dead letters
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 1024
	}
	if cfg.LatencyTarget == 0 {
		cfg.LatencyTarget = 100 * time.Millisecond
	}
	if cfg.Retry == nil {
		p := flow.Interactive()
		p.MaxAttempts = 5
		p.AttemptTimeout = flow.Duration(200 * time.Millisecond)
		p.MaxElapsed = flow.Duration(400 * time.Millisecond)
		cfg.Retry = &p
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := []stream.Option{stream.WithPipeline("delivery"), stream.WithLogger(cfg.Logger)}
	if cfg.DrainTimeout > 0 {
		opts = append(opts, stream.WithDrainTimeout(cfg.DrainTimeout))
	}
	switch {
	case cfg.Observer != nil:
		opts = append(opts, stream.WithObserver(cfg.Observer))
	case cfg.Metrics != nil:
		opts = append(opts, stream.WithObserver(cfg.Metrics.Observer()))
	}
	g := stream.New(opts...)
	raw := stream.From(g, cfg.Source, stream.Name("requests"))
	reqs := stream.Via(raw, flow.Map(Parse), stream.Name("parse"))
	// A request travels the steps as one *Progress: each step records what
	// it did in place, only on success, so a retry or a failure still sees
	// the steps done before it.
	valid := stream.Via(reqs, flow.Map(func(r Request) (*Progress, error) {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		// Room for every step: recording one never allocates.
		return &Progress{Request: r, Done: make([]Step, 0, len(Steps))}, nil
	}), stream.Name("validate"))

	sch := &Scheduler{Graph: g, Steps: map[Step]*flow.Async[*Progress, *Progress]{},
		Breakers: map[Step]*backpressure.Breaker{}, Limits: map[Step]*backpressure.Adaptive{}}
	b := cfg.Backends
	steps := []struct {
		step Step
		fn   stepFunc
	}{
		{StepAccount, func(ctx context.Context, p *Progress) error {
			return b.Accounts.Check(ctx, p.Request.Owner)
		}},
		{StepPackage, func(ctx context.Context, p *Progress) error {
			return b.Packages.Put(ctx, p.Request.ID, p.Request)
		}},
		{StepThirdParty, func(ctx context.Context, p *Progress) error {
			need, err := b.ThirdParty.Needed(ctx, p.Request)
			if err == nil {
				p.ThirdParty = need
			}
			return err
		}},
		{StepDrone, func(ctx context.Context, p *Progress) error {
			id, err := b.Drones.Schedule(ctx, p.Request.ID, p.Request.Pickup)
			if err == nil {
				p.DroneID = id
			}
			return err
		}},
		{StepDelivery, func(ctx context.Context, p *Progress) error {
			return b.Deliveries.Put(ctx, p.Request.ID, *p)
		}},
	}
	s := valid
	for _, st := range steps {
		fn := st.fn
		step := st.step
		keyed := false
		if cfg.Steps != nil && slices.Contains(cfg.NonIdempotent, step) {
			fn = recorded(cfg.Steps, step, fn)
			keyed = true
		}
		br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: string(step)})
		if err != nil {
			return nil, err
		}
		lim, err := backpressure.NewAdaptive(backpressure.AdaptiveConfig{Target: cfg.LatencyTarget,
			Initial: max(1, cfg.Parallelism/4), Min: max(1, cfg.Parallelism/4), Max: cfg.Parallelism})
		if err != nil {
			return nil, err
		}
		sch.Breakers[step], sch.Limits[step] = br, lim
		aopts := []flow.AsyncOption{flow.Retry(*cfg.Retry), flow.LogRetries(cfg.Logger), flow.Breaker(br), flow.WithLimiter(lim)}
		if keyed {
			// One call at a time per delivery: two copies of a request (a
			// duplicate) must not both find the step unrecorded and both
			// run it.
			aopts = append(aopts, flow.KeyBy(func(m *stream.Message[*Progress]) string { return m.Value.Request.ID }))
		}
		if cfg.Metrics != nil {
			aopts = append(aopts, cfg.Metrics.AsyncOptions(string(step))...)
		}
		a := flow.MapAsync(cfg.Parallelism, func(ctx context.Context, p *Progress) (*Progress, error) {
			if err := fn(ctx, p); err != nil {
				return p, err
			}
			p.Done = append(p.Done, step)
			return p, nil
		}, aopts...)
		sch.Steps[step] = a
		s = stream.Via(s, stream.Flow[*Progress, *Progress](a), stream.Name(string(step)))
		if cfg.Metrics != nil {
			cfg.Metrics.Async(string(step), a)
			cfg.Metrics.Breaker(string(step), br)
		}
	}
	ck := checkpoint.New[*Progress](cfg.Committer, checkpoint.Interval(200*time.Millisecond))
	stream.To(s, stream.Sink[*Progress](ck), stream.Name("checkpoint"))
	if cfg.Metrics != nil {
		cfg.Metrics.Graph(g)
		cfg.Metrics.Checkpoint("checkpoint", ck)
	}

	// A failure after some steps succeeded must be compensated; anything
	// else is dead-lettered with its reason.
	compensate, dead := stream.Split(g.Failures(), func(f stream.Failure) bool {
		p, ok := f.Value.(*Progress)
		return ok && len(p.Done) > 0
	}, stream.Name("route-failures"))
	events := kafkasink.NewSink(cfg.Producer, func(m *stream.Message[stream.Failure]) (*kgo.Record, error) {
		ev := Compensation{Progress: *m.Value.Value.(*Progress), Stage: m.Value.Stage, Reason: capReason(fmt.Sprint(m.Value.Err))}
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		return &kgo.Record{Topic: cfg.FailuresTopic, Key: []byte(ev.Progress.Request.ID), Value: b}, nil
	}).SettleAs(stream.DeadLettered)
	stream.To(compensate, stream.Sink[stream.Failure](events), stream.Name("compensation-events"))
	stream.To(dead, stream.Sink[stream.Failure](kafkasink.NewDeadLetter(cfg.Producer, cfg.DeadLetterTopic)), stream.Name("dead-letters"))
	return sch, nil
}

// maxReason bounds the reason a compensation event carries: an error's
// text (a service's answer) can be as large as the service likes, and an
// event too large to write would stop the scheduler.
const maxReason = 4 << 10

func capReason(r string) string {
	if len(r) <= maxReason {
		return r
	}
	return fmt.Sprintf("%s... (%d bytes, truncated)", strings.ToValidUTF8(r[:maxReason], ""), len(r))
}

// ErrOutcomeUnknown fails a request whose non-idempotent step was called
// and never answered: a worker crashed mid-call, or the attempt timed out or
// lost its connection. The service may have acted; calling again could act
// twice, so the request is compensated instead (the supervisor undoes the
// step, which is harmless if it had not acted).
var ErrOutcomeUnknown = errors.New("outcome of a non-idempotent step is unknown; compensating rather than risking it twice")

// recorded wraps a step that is not idempotent. A request that completed it
// before (a replay) skips it and gets the recorded value back; one whose
// step another copy started (a copy that crashed, or gave up on an
// answer) fails with ErrOutcomeUnknown. Marks name the copy of the request
// (its *Progress) that wrote them, so a copy's own retry is not mistaken
// for a stranger's.
// Otherwise the call is marked started (in the same round trip as the
// read), made, and then recorded done — or,
// if the service answered that it did not act, the mark is cleared so that
// a retry may call again. The writes after the call are made even if the
// pipeline is stopping, so that a call that acted is never forgotten.
func recorded(store StepStore, step Step, fn stepFunc) stepFunc {
	return func(ctx context.Context, p *Progress) error {
		id := p.Request.ID
		if p.mark == "" {
			p.mark = strconv.FormatUint(rand.Uint64(), 36)
		}
		rec, err := store.Begin(ctx, id, step, p.mark)
		if err != nil {
			// The mark may have been written: if so it is this copy's,
			// and the retry will know it called nothing.
			return stream.Transient(err)
		}
		if rec.Done {
			if step == StepDrone {
				p.DroneID = rec.Value
			}
			return nil
		}
		if rec.StartedBy != "" && rec.StartedBy != p.mark {
			return fmt.Errorf("%s of %s: %w", step, id, ErrOutcomeUnknown)
		}
		if err := ctx.Err(); err != nil {
			return stream.Transient(fmt.Errorf("%s of %s not called: %w", step, id, err))
		}
		callErr := fn(ctx, p)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		switch {
		case callErr == nil:
			value := ""
			if step == StepDrone {
				value = p.DroneID
			}
			if err := store.Record(wctx, id, step, value); err != nil {
				return stream.Fatal(fmt.Errorf("recording %s of %s after it ran: %w", step, id, err))
			}
			return nil
		case outcomeUnknown(callErr):
			// Not wrapped with %w: the cause (a timeout) would read as
			// transient and be retried.
			return fmt.Errorf("%s of %s: %w (the call ended with: %v)", step, id, ErrOutcomeUnknown, callErr)
		default:
			if err := store.Abandon(wctx, id, step); err != nil {
				return stream.Transient(err)
			}
			return callErr
		}
	}
}

// outcomeUnknown reports whether a failed call may still have acted: it
// timed out, was cancelled or lost its connection after it was sent. A
// refused connection or an answer from the service (an error status, a
// throttle, a refusal) means it did not.
func outcomeUnknown(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	c := stream.Classify(err)
	return c.Transient && (c.Reason == stream.ReasonTimeout || c.Reason == stream.ReasonConnection)
}

// stepFunc runs one step for a request and records on p what it learned
// (only when it succeeds).
type stepFunc func(ctx context.Context, p *Progress) error
