package demo

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// deadLettered counts what reached the dead letters.
func deadLettered(sch *delivery.Scheduler) int {
	for _, s := range sch.Graph.Stats() {
		if s.Name == "dead-letters" {
			return int(s.In)
		}
	}
	return 0
}

// lag is the requests' lag, by level.
func (inc *incarnation) lag() [delivery.Levels]int64 {
	var lag [delivery.Levels]int64
	for l, src := range inc.levels {
		lag[l] = src.behind()
	}
	return lag
}

// held is what the scheduler holds: parked requests read back and held
// until their replay time, and requests in its other stages (in flight
// or buffered).
func (inc *incarnation) held() (parked, inStages int64) {
	for _, s := range inc.sch.Graph.Stats() {
		if s.Name == "replay-delay" {
			parked += s.InFlight()
			continue
		}
		inStages += s.InFlight() + s.Buffered
	}
	return parked, inStages
}

// received is how many requests each level's source has read.
func (inc *incarnation) received() [delivery.Levels]int64 {
	var n [delivery.Levels]int64
	for l, src := range inc.levels {
		n[l] = src.records()
	}
	return n
}

// ready reports whether every source of the requests is ready.
func (inc *incarnation) ready(ctx context.Context) error {
	for l, src := range inc.levels {
		if err := src.Ready(ctx); err != nil {
			return fmt.Errorf("%s requests: %w", delivery.LevelNames[l], err)
		}
	}
	return nil
}

// incarnation is one life of the scheduler and the supervisor.
type incarnation struct {
	sch               *delivery.Scheduler
	sup               *stream.Graph
	levels            [delivery.Levels]input // the requests, a source per level
	supSrc, replaySrc input
	parkedSrc         input // the scheduler's replays
	stop              context.CancelFunc
	done              chan struct{}
	crashed           atomic.Bool
}

// shutdown stops both pipelines: a crash stops them without a drain (their
// errors are expected then); otherwise they drain.
func (inc *incarnation) shutdown(crash bool) {
	inc.crashed.Store(crash)
	inc.stop()
	<-inc.done
	for _, src := range inc.levels {
		src.stop()
	}
	inc.supSrc.stop()
	inc.replaySrc.stop()
	inc.parkedSrc.stop()
}

// workers holds the current incarnation and what earlier ones
// dead-lettered.
type workers struct {
	mu       sync.Mutex
	cur      *incarnation
	deadBase int
}

func (w *workers) set(inc *incarnation) {
	w.mu.Lock()
	if w.cur != nil {
		w.deadBase += deadLettered(w.cur.sch)
	}
	w.cur = inc
	w.mu.Unlock()
}

func (w *workers) current() *incarnation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *workers) deadLettered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadBase + deadLettered(w.cur.sch)
}

// spawner starts incarnations of the scheduler and the supervisor, all
// on the same transport, backends and step records.
type spawner struct {
	cfg      Config
	tr       *transport
	backends delivery.Backends
	steps    delivery.StepStore
	reg      *prometheus.Registry // the metrics' registry
	notes    *supervisor.Notifications
	lat      *latencies
	levels   *delivery.LevelStats // every incarnation's completions by level
	// schedMetrics and supMetrics, when set, receive the metrics of the
	// incarnation spawned with metrics (one per run: a pipeline's metrics
	// are registered once).
	schedMetrics, supMetrics *observe.Metrics
	drain                    time.Duration // the pipelines' drain timeout (0: their default)
	lives                    int           // incarnations spawned
	errs                     chan error    // a pipeline that ended with an error, crashes aside
}

// spawn starts an incarnation; withMetrics registers its pipelines'
// metrics.
func (sp *spawner) spawn(ctx context.Context, withMetrics bool) (*incarnation, error) {
	inc := &incarnation{done: make(chan struct{})}
	sp.lives++
	var srcs []input
	open := func(group, topic string) (input, error) {
		s, err := sp.tr.open(ctx, group, topic, sp.lives)
		if err == nil {
			srcs = append(srcs, s)
		}
		return s, err
	}
	fail := func(err error) (*incarnation, error) {
		for _, s := range srcs {
			s.stop()
		}
		return nil, err
	}
	var err error
	for l, topic := range topicLevels {
		if inc.levels[l], err = open("scheduler-"+delivery.LevelNames[l], topic); err != nil {
			return fail(err)
		}
	}
	if inc.supSrc, err = open("supervisor", topicFailures); err != nil {
		return fail(err)
	}
	if inc.replaySrc, err = open("supervisor-replay", topicRetry); err != nil {
		return fail(err)
	}
	if inc.parkedSrc, err = open("scheduler-replay", topicParked); err != nil {
		return fail(err)
	}
	cfg := sp.cfg
	levels := make([]source.Level[[]byte], 0, delivery.Levels)
	for _, src := range inc.levels {
		levels = append(levels, source.Level[[]byte]{Source: src})
	}
	scfg := delivery.SchedulerConfig{Levels: levels, Policy: cfg.Policy, Parallelism: cfg.Parallelism,
		LevelStats: sp.levels, Backends: sp.backends, Producer: sp.tr.producer,
		FailuresTopic: topicFailures, DeadLetterTopic: topicDead, Observer: sp.lat, Logger: cfg.Logger, DrainTimeout: sp.drain,
		Steps: sp.steps, NonIdempotent: []delivery.Step{delivery.StepDrone},
		ParkTopic: topicParked, Replay: inc.parkedSrc, ReplayCommitter: inc.parkedSrc,
		ReplayAfter: replayAfter, MaxReplayDelay: maxReplayDelay, StaleAfter: staleAfter, TracerProvider: cfg.TracerProvider}
	pcfg := supervisor.Config{Source: inc.supSrc, Committer: inc.supSrc, Backends: sp.backends, Notifier: sp.notes,
		Logger: cfg.Logger, DrainTimeout: sp.drain, Producer: sp.tr.producer, RetryTopic: topicRetry,
		DeadLetterTopic: topicSupervisorDead, Replay: inc.replaySrc, ReplayCommitter: inc.replaySrc,
		ReplayAfter: replayAfter, MaxReplayDelay: maxReplayDelay, TracerProvider: cfg.TracerProvider}
	if withMetrics {
		scfg.Metrics, pcfg.Metrics = sp.schedMetrics, sp.supMetrics
	}
	if inc.sch, err = delivery.NewScheduler(scfg); err != nil {
		return fail(err)
	}
	if inc.sup, err = supervisor.New(pcfg); err != nil {
		return fail(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	inc.stop = stop
	var wg sync.WaitGroup
	for _, g := range []*stream.Graph{inc.sch.Graph, inc.sup} {
		wg.Go(func() {
			if err := g.Run(runCtx); err != nil && !inc.crashed.Load() {
				sp.errs <- err
			}
		})
	}
	go func() { wg.Wait(); close(inc.done) }()
	return inc, nil
}

// crashes crashes the scheduler and the supervisor cfg.Restarts times, at
// even moments of the load: it stops them without draining (in-flight
// messages stay unsettled and are redone) and starts new ones in the same
// groups.
func (sp *spawner) crashes(ctx context.Context, w8 *workers, w io.Writer) {
	every := sp.cfg.Duration / time.Duration(sp.cfg.Restarts+1)
	for range sp.cfg.Restarts {
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return
		}
		w8.current().shutdown(true)
		inc, err := sp.spawn(ctx, false)
		if err != nil {
			sp.errs <- err
			return
		}
		w8.set(inc)
		fmt.Fprintln(w, "  -- scheduler and supervisor crashed and restarted --")
	}
}
