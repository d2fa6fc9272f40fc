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
		return ev, Undo(ctx, b, ev.Progress)
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

// Undo reverses every side effect of the workflow for p's request, last
// first: delivery, drone, package. Not only the steps p.Done lists: in an
// at-least-once pipeline another copy of the request (a replay after a
// crash, a duplicate) may have gone further than the copy that failed — it
// may even have completed — before the compensation runs. Undoing a step
// that was never done is harmless, and every undo leaves a tombstone that
// refuses a later copy's create, so the request ends cancelled whichever
// copy got how far. The step that failed is covered too: its outcome is
// unknown (an attempt may have timed out after the service acted). Each
// undo is idempotent, so Undo may run again after a crash. Checks
// (account, third party) have nothing to undo.
func Undo(ctx context.Context, b delivery.Backends, p delivery.Progress) error {
	id := p.Request.ID
	for _, u := range []struct {
		step delivery.Step
		undo func(context.Context, string) error
	}{
		{delivery.StepDelivery, b.Deliveries.Delete},
		{delivery.StepDrone, b.Drones.Cancel},
		{delivery.StepPackage, b.Packages.Delete},
	} {
		if err := u.undo(ctx, id); err != nil {
			return fmt.Errorf("undoing %s of %s: %w", u.step, id, err)
		}
	}
	return nil
}
