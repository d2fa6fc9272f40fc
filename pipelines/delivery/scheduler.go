package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

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
	if cfg.Parallelism == 0 {
		cfg.Parallelism = DefaultParallelism
	}
	if cfg.LatencyTarget == 0 {
		cfg.LatencyTarget = 100 * time.Millisecond
	}
	if cfg.Retry == nil {
		p := DefaultRetry()
		cfg.Retry = &p
	}
	if err := CheckRetry(*cfg.Retry); err != nil {
		return nil, fmt.Errorf("delivery scheduler: Retry: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReplayAfter == 0 {
		cfg.ReplayAfter = 2 * time.Second
	}
	if cfg.MaxReplayDelay == 0 {
		cfg.MaxReplayDelay = time.Minute
	}
	if cfg.DefaultHorizon == 0 {
		cfg.DefaultHorizon = DefaultHorizon
	}
	if cfg.MaxParkings < 0 || cfg.DefaultHorizon < 0 {
		return nil, fmt.Errorf("delivery scheduler: MaxParkings %d and DefaultHorizon %v must not be negative", cfg.MaxParkings, cfg.DefaultHorizon)
	}
	if cfg.MaxStoreOutage == 0 {
		cfg.MaxStoreOutage = 2 * time.Minute
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 10 * time.Second
	}
	if cfg.ParkTopic != "" && (cfg.Replay == nil || cfg.ReplayCommitter == nil) {
		return nil, fmt.Errorf("delivery scheduler: ParkTopic %q needs Replay and ReplayCommitter, to read it back", cfg.ParkTopic)
	}
	switch {
	case cfg.Source != nil && cfg.Levels != nil:
		return nil, fmt.Errorf("delivery scheduler: give Source or Levels, not both")
	case cfg.Levels != nil && len(cfg.Levels) != Levels:
		return nil, fmt.Errorf("delivery scheduler: %d Levels, want %d (high, normal, low)", len(cfg.Levels), Levels)
	}
	if cfg.Levels != nil && cfg.Committer == nil {
		cs := make([]stream.Committer, len(cfg.Levels))
		for l, lv := range cfg.Levels {
			c, ok := lv.Source.(stream.Committer)
			if !ok {
				return nil, fmt.Errorf("delivery scheduler: level %d's source is no stream.Committer: give Committer", l)
			}
			cs[l] = c
		}
		cfg.Committer = stream.Committers(cs...)
	}
	if cfg.Policy.Levels() == 0 {
		cfg.Policy = DefaultPolicy()
	}
	if cfg.Reserve == nil {
		cfg.Reserve = DefaultReserve
	}
	cfg.Reserve = fitReserve(cfg.Reserve, cfg.Parallelism)
	if cfg.Buffer == 0 {
		cfg.Buffer = min(DefaultBuffer, max(16, cfg.Parallelism/2))
	}
	opts := []stream.Option{stream.WithPipeline("delivery"), stream.WithLogger(cfg.Logger), stream.WithCapacity(cfg.Buffer)}
	if cfg.DrainTimeout > 0 {
		opts = append(opts, stream.WithDrainTimeout(cfg.DrainTimeout))
	}
	if cfg.Observer != nil {
		opts = append(opts, stream.WithObserver(cfg.Observer))
	}
	g := stream.New(opts...)
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
	committer := cfg.Committer
	// A request travels the steps as one *Progress: each step records what
	// it did in place, only on success, so a retry or a failure still sees
	// the steps done before it. It keeps the record's bytes, which a
	// parking writes back as they came.
	valid := stream.Via(reqs, parse(cfg.Levels != nil, cfg.LevelStats), stream.Name("parse"))
	// A parked request is replayed at its time, or at once when the
	// service of the step it failed at is back (its breaker closed again);
	// one that comes back past its deadline is compensated.
	recovered := backpressure.NewRecovery()
	if cfg.ParkTopic != "" {
		replays := stream.From(g, cfg.Replay, stream.Name("replays"))
		due := stream.Via(replays, flow.Delay[[]byte](kafkasink.ReplayDue(recovered.At), flow.Recheck(recovered.C())),
			stream.Name("replay-delay"))
		if cfg.Levels != nil {
			// A replay has no topic of a level: Normal, until its own
			// priority or its tier says.
			due = stream.Via(due, flow.Prioritize(Levels, func([]byte) (int, error) { return Normal, nil }), stream.Name("replay-level"))
		}
		parsed := stream.Via(due, parse(cfg.Levels != nil, cfg.LevelStats), stream.Name("replay-parse"))
		late := &lateReplays{horizon: cfg.DefaultHorizon, now: time.Now}
		valid = stream.Merge(valid, stream.Via(parsed, late.stage(), stream.Name("replay-deadline")))
		committer = stream.Committers(cfg.Committer, cfg.ReplayCommitter)
	}
	sch := &Scheduler{Graph: g, Steps: map[Step]*flow.Async[*Progress, *Progress]{},
		Breakers: map[Step]*backpressure.Breaker{}, Limits: map[Step]*backpressure.Adaptive{}}
	// Every request a level's topic holds unread has every step ahead of
	// it: the steps' desired workers count it (sluice_lane_desired_workers).
	var backlog func(level int) int64
	if lags := levelLags(cfg.Levels); lags != nil {
		backlog = func(l int) int64 {
			if l < len(lags) && lags[l] != nil {
				return lags[l].Lag()
			}
			return 0
		}
	}

	b := cfg.Backends
	steps := []struct {
		step Step
		fn   stepFunc
	}{
		{StepAccount, func(ctx context.Context, p *Progress) error {
			acct, err := b.Accounts.Check(ctx, p.Request.Owner)
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
	waiter := &storeWaiter{limit: cfg.MaxStoreOutage}
	s := valid
	for _, st := range steps {
		fn := st.fn
		step := st.step
		keyed := false
		if cfg.Steps != nil && slices.Contains(cfg.NonIdempotent, step) {
			rs := &recordedStep{store: cfg.Steps, wait: waiter, step: step, call: fn, staleAfter: cfg.StaleAfter}
			if step == StepDrone {
				rs.lookup = func(ctx context.Context, p *Progress) (string, bool, error) {
					return b.Drones.Booking(ctx, p.Request.ID)
				}
			}
			fn = rs.run
			keyed = true
		}
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
		call := func(ctx context.Context, p *Progress) (*Progress, error) {
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
		s = stream.Via(s, a, stream.Name(string(step)))
		if step == StepAccount {
			// The owner's tier is known: from here on a request is served
			// at its own priority's level, or its tier's.
			s = stream.Via(s, flow.Prioritize(Levels, PriorityOf), stream.Name("prioritize"))
		}
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

// ahead is how long a request's steps take at most now: the sum of their
// attempt timeouts, which a replay must have left before its deadline.
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
