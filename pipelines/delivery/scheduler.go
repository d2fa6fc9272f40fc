package delivery

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

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
//	requests (Source, or Levels -> priority) --------------+
//	replays (ParkTopic) -> replay-delay (-> replay-level) --+-> parse -> check_account -> prioritize
//	      -> create_package -> check_third_party -> schedule_drone -> create_delivery (-> levels) -> checkpoint
//	failures -> judge-failures -> dead letters (malformed, invalid)
//	                           -> park (transient, outlasted the retries)
//	                           -> compensation events (failed for good)
//	                           -> already delivered / cancelled (another copy's outcome stands)
//
// Every step serves its requests by level (flow.Lanes): parse sets a
// request's level from its own priority (else its topic's, or Normal),
// prioritize from its own priority or its owner's tier (PriorityOf).
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := cfg.joinLevelCommitters(); err != nil {
		return nil, err
	}
	g := stream.New(cfg.graphOptions()...)
	// A parked request is replayed at its time, or at once when the
	// service of the step it failed at is back (its breaker closed again);
	// one that comes back past its deadline is compensated.
	recovered := backpressure.NewRecovery()
	valid, committer := readRequests(g, cfg, recovered)
	sch := &Scheduler{Graph: g, Steps: map[Step]*flow.Async[*Progress, *Progress]{},
		Breakers: map[Step]*backpressure.Breaker{}, Limits: map[Step]*backpressure.Adaptive{}}
	s, err := sch.addSteps(valid, cfg, recovered)
	if err != nil {
		return nil, err
	}
	if cfg.LevelStats != nil {
		s = stream.Via(s, countLevels(cfg.LevelStats), stream.Name("levels"))
	}
	ck := checkpoint.New[*Progress](committer, checkpoint.Interval(200*time.Millisecond))
	stream.To(s, ck, stream.Name("checkpoint"))
	routeFailures(g, cfg, sch.ahead, recovered)
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(g); err != nil {
			return nil, err
		}
	}
	return sch, nil
}

// graphOptions are the options of the scheduler's graph.
func (cfg *SchedulerConfig) graphOptions() []stream.Option {
	opts := []stream.Option{stream.WithPipeline("delivery"), stream.WithLogger(cfg.Logger), stream.WithCapacity(cfg.Buffer)}
	if cfg.DrainTimeout > 0 {
		opts = append(opts, stream.WithDrainTimeout(cfg.DrainTimeout))
	}
	if cfg.Observer != nil {
		opts = append(opts, stream.WithObserver(cfg.Observer))
	}
	if cfg.TracerProvider != nil {
		opts = append(opts, stream.WithTracerProvider(cfg.TracerProvider))
	}
	return opts
}

// readRequests adds the sources of the requests to g, the parking's
// replays merged in if it parks, and returns the requests parsed and the
// committer of everything they read.
//
// A request travels the steps as one *Progress: each step records what
// it did in place, only on success, so a retry or a failure still sees
// the steps done before it. It keeps the record's bytes, which a
// parking writes back as they came, with the steps done beside them
// for its replay to skip.
func readRequests(g *stream.Graph, cfg SchedulerConfig, recovered *backpressure.Recovery) (stream.Stream[*Progress], stream.Committer) {
	var reqs stream.Stream[[]byte]
	if cfg.Levels != nil {
		levels := make([]source.Level[[]byte], len(cfg.Levels))
		for i, l := range cfg.Levels {
			levels[i] = l
			if l.Name == "" {
				levels[i].Name = "requests-" + LevelNames[i]
			}
		}
		reqs = source.Priority(g, cfg.Policy, levels)
	} else {
		reqs = stream.From(g, cfg.Source, stream.Name("requests"))
	}
	valid := stream.Via(reqs, parse(cfg.Levels != nil, false, cfg.LevelStats), stream.Name("parse"))
	if cfg.ParkTopic == "" {
		return valid, cfg.Committer
	}
	return stream.Merge(valid, readReplays(g, cfg, recovered)), stream.Committers(cfg.Committer, cfg.ReplayCommitter)
}

// readReplays adds the replays of parked requests to g: each waits for
// its time, or for its step's service to be back, and one that comes
// back past its deadline fails.
func readReplays(g *stream.Graph, cfg SchedulerConfig, recovered *backpressure.Recovery) stream.Stream[*Progress] {
	replays := stream.From(g, cfg.Replay, stream.Name("replays"))
	// Each replay comes back at its time: a throttled request's, a
	// second after its parking, is not held behind one parked again for
	// longer in its partition (the requests are independent; copies of
	// one are told apart by the steps' records and the outcome checks).
	due := stream.Via(replays, flow.Delay[[]byte](kafkasink.ReplayDue(recovered.At), flow.Recheck(recovered.C()), flow.AnyOrder()),
		stream.Name("replay-delay"))
	if cfg.Levels != nil {
		// A replay has no topic of a level: Normal, until its own
		// priority or its tier says.
		due = stream.Via(due, flow.Prioritize(Levels, func([]byte) (int, error) { return Normal, nil }), stream.Name("replay-level"))
	}
	parsed := stream.Via(due, parse(cfg.Levels != nil, true, cfg.LevelStats), stream.Name("replay-parse"))
	late := &lateReplays{horizon: cfg.DefaultHorizon, now: time.Now}
	return stream.Via(parsed, late.stage(), stream.Name("replay-deadline"))
}

// namedStep is a step and the call to its service.
type namedStep struct {
	step Step
	fn   stepFunc
}

// stepCalls returns the steps in their order, each with its call to b.
func stepCalls(b Backends) []namedStep {
	return []namedStep{
		{StepAccount, func(ctx context.Context, p *Progress) error {
			// The check is keyed by owner: it says which delivery it is for.
			acct, err := b.Accounts.Check(ForDelivery(ctx, p.Request.ID), p.Request.Owner)
			if err == nil {
				p.Tier = acct.Tier
			}
			return err
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
}

// addSteps chains the steps after s, in their order, and returns their
// output.
func (sch *Scheduler) addSteps(s stream.Stream[*Progress], cfg SchedulerConfig, recovered *backpressure.Recovery) (stream.Stream[*Progress], error) {
	backlog := levelBacklog(cfg.Levels)
	waiter := &storeWaiter{limit: cfg.MaxStoreOutage}
	for _, st := range stepCalls(cfg.Backends) {
		a, err := sch.newStep(st, cfg, waiter, recovered, backlog)
		if err != nil {
			return s, err
		}
		s = stream.Via(s, a, stream.Name(string(st.step)))
		if st.step == StepAccount {
			// The owner's tier is known: from here on a request is served
			// at its own priority's level, or its tier's.
			s = stream.Via(s, flow.Prioritize(Levels, PriorityOf), stream.Name("prioritize"))
		}
	}
	return s, nil
}

// levelBacklog returns how many requests a level's topic holds unread,
// nil if no level's source tells. Every such request has every step
// ahead of it: the steps' desired workers count it
// (sluice_lane_desired_workers).
func levelBacklog(levels []source.Level[[]byte]) func(level int) int64 {
	lags := levelLags(levels)
	if lags == nil {
		return nil
	}
	return func(l int) int64 {
		if l < len(lags) && lags[l] != nil {
			return lags[l].Lag()
		}
		return 0
	}
}

// newStep returns the stage of one step: its call, recorded in the step
// store if it is not idempotent, behind the step's breaker and adaptive
// limit (which it records in sch), with the retry policy and the lanes
// of the levels.
func (sch *Scheduler) newStep(st namedStep, cfg SchedulerConfig, waiter *storeWaiter, recovered *backpressure.Recovery,
	backlog func(level int) int64) (*flow.Async[*Progress, *Progress], error) {
	step := st.step
	fn, keyed := recordStep(st, cfg, waiter)
	br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: string(step), MaxOpenFor: breakerMaxOpen,
		OnStateChange: recovered.OnStateChange})
	if err != nil {
		return nil, err
	}
	lo := min(cfg.Parallelism, minLimit)
	lim, err := backpressure.NewAdaptive(backpressure.AdaptiveConfig{Target: cfg.LatencyTarget,
		Initial: max(lo, min(cfg.Parallelism, initialLimit)), Min: lo, Max: cfg.Parallelism})
	if err != nil {
		return nil, err
	}
	sch.Breakers[step], sch.Limits[step] = br, lim
	// Each attempt is timed from its send: the backends say when (the HTTP
	// client once the request is written, the simulated services when
	// called), so a worker short of CPU or connections makes a call wait,
	// not time out; and the limit follows the service's latency.
	// Lanes: a freed slot goes to the highest level waiting, beyond
	// the slots reserved for the others while they wait.
	aopts := []flow.AsyncOption{flow.Retry(*cfg.Retry), flow.TimeoutFromSend(),
		flow.Breaker(br), flow.WithLimiter(lim), flow.Lanes(backpressure.StrictPriority(Levels), cfg.Reserve...)}
	if backlog != nil {
		aopts = append(aopts, flow.LaneScaling(0, backlog))
	}
	// A step done before its request was parked (a replay carries its
	// steps done, resumeProgress) is not called again: what it found is
	// on p. Its service hears nothing of it, nor does its breaker, which
	// lets it pass while refusing the calls.
	aopts = append(aopts, flow.SkipCall(func(p *Progress) (*Progress, bool) { return p, slices.Contains(p.Done, step) }))
	// A replay waited its turn at the steps before its parking, and its
	// Retry-After since: it is called before the fresh requests waiting
	// at its level, not behind a whole window of them (paying first
	// still holds: a level above it goes before it).
	aopts = append(aopts, flow.ServeFirst(func(p *Progress) bool { return p.replayed }))
	call := func(ctx context.Context, p *Progress) (*Progress, error) {
		// The step's span names the request: the URLs of the checks,
		// keyed by owner or by content, do not (url.full has no query).
		if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
			sp.SetAttributes(attribute.String("sluice.delivery.id", p.Request.ID))
		}
		if err := fn(ctx, p); err != nil {
			return p, err
		}
		p.Done = append(p.Done, step)
		return p, nil
	}
	var a *flow.Async[*Progress, *Progress]
	if keyed {
		// One call at a time per delivery: two copies of a request (a
		// duplicate) must not both find the step unrecorded and both
		// run it.
		a = flow.MapAsyncByKey(cfg.Parallelism, func(m *stream.Message[*Progress]) string { return m.Value.Request.ID }, call, aopts...)
	} else {
		a = flow.MapAsync(cfg.Parallelism, call, aopts...)
	}
	sch.Steps[step] = a
	return a, nil
}

// recordStep returns the call of a step: recorded in the step store if
// the step is not idempotent (keyed, then, by request), else its own.
func recordStep(st namedStep, cfg SchedulerConfig, waiter *storeWaiter) (fn stepFunc, keyed bool) {
	if cfg.Steps == nil || !slices.Contains(cfg.NonIdempotent, st.step) {
		return st.fn, false
	}
	rs := &recordedStep{store: cfg.Steps, wait: waiter, step: st.step, call: st.fn, staleAfter: cfg.StaleAfter}
	if st.step == StepDrone {
		b := cfg.Backends
		rs.lookup = func(ctx context.Context, p *Progress) (string, bool, error) {
			return b.Drones.Booking(ctx, p.Request.ID)
		}
	}
	return rs.run, true
}

// ahead is how long a request's steps take at most now: the sum of their
// attempt timeouts, which a replay must have left before its deadline.
// All five, even for a replay that will skip the steps it did before its
// parking: a conservative bound, the same for every replay.
func (s *Scheduler) ahead() time.Duration {
	var d time.Duration
	for _, a := range s.Steps {
		d += a.AttemptTimeout()
	}
	return d
}

// levelLags returns the levels' sources that report a lag (a Kafka
// source's records not fetched yet), nil if none does.
func levelLags(levels []source.Level[[]byte]) []source.Lagger {
	var lags []source.Lagger
	for l, lv := range levels {
		if lg, ok := lv.Source.(source.Lagger); ok {
			if lags == nil {
				lags = make([]source.Lagger, len(levels))
			}
			lags[l] = lg
		}
	}
	return lags
}
