// Package supervisor is the compensating side of the delivery scheduler
// (scheduler-agent-supervisor): it reads compensation events — a request,
// the steps that succeeded, the reason it failed — and undoes those steps
// in reverse order (cancel the drone, delete the delivery and the package),
// with its own retries, then records a notification for the owner. Every
// undo is idempotent, and an event is committed only once all its undos
// succeeded, so a supervisor that crashes mid-compensation redoes the event
// and changes nothing twice.
package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// Notifier records that a request was compensated.
type Notifier interface {
	Notify(ctx context.Context, ev delivery.Compensation) error
}

// Notifications is an in-memory Notifier that keeps one notification per
// request id, however often it is told.
type Notifications struct {
	mu   sync.Mutex
	byID map[string]delivery.Compensation
}

// NewNotifications returns an empty set.
func NewNotifications() *Notifications {
	return &Notifications{byID: map[string]delivery.Compensation{}}
}

// Notify records ev.
func (n *Notifications) Notify(_ context.Context, ev delivery.Compensation) error {
	n.mu.Lock()
	n.byID[ev.Progress.Request.ID] = ev
	n.mu.Unlock()
	return nil
}

// Len returns how many requests were compensated.
func (n *Notifications) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.byID)
}

// Has reports whether the request id was compensated.
func (n *Notifications) Has(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.byID[id]
	return ok
}

// Config wires the supervisor.
type Config struct {
	// Source reads compensation events; Committer commits them.
	Source    stream.Source[[]byte]
	Committer stream.Committer
	Backends  delivery.Backends
	Notifier  Notifier
	// Retry is the policy of the undo calls (default flow.Background with
	// 10 attempts: undos must get through, they need not be fast).
	Retry   *flow.RetryPolicy
	Metrics *observe.Metrics
	Logger  *slog.Logger
	// DrainTimeout bounds the drain on cancel (default 10s).
	DrainTimeout time.Duration
}

// New builds the supervisor pipeline:
//
//	kafka -> parse -> undo (reverse order, retried) -> notify -> checkpoint
func New(cfg Config) (*stream.Graph, error) {
	if cfg.Retry == nil {
		p := flow.Background()
		p.MaxAttempts = 10
		p.MaxDelay = flow.Duration(2 * time.Second)
		p.MaxElapsed = flow.Duration(time.Minute)
		cfg.Retry = &p
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := []stream.Option{stream.WithPipeline("supervisor"), stream.WithLogger(cfg.Logger)}
	if cfg.DrainTimeout > 0 {
		opts = append(opts, stream.WithDrainTimeout(cfg.DrainTimeout))
	}
	if cfg.Metrics != nil {
		opts = append(opts, stream.WithObserver(cfg.Metrics.Observer()))
	}
	g := stream.New(opts...)
	raw := stream.From(g, cfg.Source, stream.Name("failures"))
	evs := stream.Via(raw, flow.Map(func(b []byte) (delivery.Compensation, error) {
		var ev delivery.Compensation
		if err := json.Unmarshal(b, &ev); err != nil {
			return ev, fmt.Errorf("malformed compensation event: %w", err)
		}
		return ev, nil
	}), stream.Name("parse"))
	b := cfg.Backends
	undo := flow.MapAsync(64, func(ctx context.Context, ev delivery.Compensation) (delivery.Compensation, error) {
		return ev, Undo(ctx, b, ev.Progress, delivery.Step(ev.Stage))
	}, flow.Retry(*cfg.Retry), flow.LogRetries(cfg.Logger))
	undone := stream.Via(evs, stream.Flow[delivery.Compensation, delivery.Compensation](undo), stream.Name("undo"))
	notified := stream.Via(undone, flow.MapAsync(16, func(ctx context.Context, ev delivery.Compensation) (delivery.Compensation, error) {
		return ev, cfg.Notifier.Notify(ctx, ev)
	}, flow.Retry(*cfg.Retry)), stream.Name("notify"))
	ck := checkpoint.New[delivery.Compensation](cfg.Committer, checkpoint.Interval(200*time.Millisecond))
	stream.To(notified, stream.Sink[delivery.Compensation](ck), stream.Name("checkpoint"))
	if cfg.Metrics != nil {
		cfg.Metrics.Graph(g)
		cfg.Metrics.Async("undo", undo)
	}
	return g, nil
}

// Undo reverses the completed steps of p, last first, starting with
// failed, the step that failed: its outcome is unknown (an attempt may have
// timed out after the service acted), and undoing what was not done is
// harmless. Each undo is idempotent, so Undo may run again for the same
// request after a crash. Checks (account, third-party) have nothing to
// undo.
func Undo(ctx context.Context, b delivery.Backends, p delivery.Progress, failed delivery.Step) error {
	done := slices.Clone(p.Done)
	if slices.Contains(delivery.Steps, failed) && !slices.Contains(done, failed) {
		done = append(done, failed)
	}
	slices.Reverse(done)
	for _, s := range done {
		var err error
		switch s {
		case delivery.StepDelivery:
			err = b.Deliveries.Delete(ctx, p.Request.ID)
		case delivery.StepDrone:
			err = b.Drones.Cancel(ctx, p.Request.ID)
		case delivery.StepPackage:
			err = b.Packages.Delete(ctx, p.Request.ID)
		}
		if err != nil {
			return fmt.Errorf("undoing %s of %s: %w", s, p.Request.ID, err)
		}
	}
	return nil
}
