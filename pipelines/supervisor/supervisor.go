// Package supervisor is the compensating side of the delivery scheduler
// (scheduler-agent-supervisor): it reads compensation events — a request,
// the steps that succeeded, the reason it failed — and undoes those steps
// in reverse order (delete the delivery, cancel the drone, delete the
// package), with its own retries — a 5xx too, since every undo is an
// idempotent DELETE (Classify) — then records a notification for the
// owner. Every undo is attempted even when another failed. Every undo is
// idempotent, and an event is committed only once all its undos
// succeeded, so a supervisor that crashes mid-compensation redoes the event
// and changes nothing twice.
package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

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
	}, flow.Retry(*cfg.Retry), flow.Classifier(Classify), flow.LogRetries(cfg.Logger))
	undone := stream.Via(evs, stream.Flow[delivery.Compensation, delivery.Compensation](undo), stream.Name("undo"))
	notified := stream.Via(undone, flow.MapAsync(16, func(ctx context.Context, ev delivery.Compensation) (delivery.Compensation, error) {
		return ev, cfg.Notifier.Notify(ctx, ev)
	}, flow.Retry(*cfg.Retry), flow.Classifier(Classify)), stream.Name("notify"))
	ck := checkpoint.New[delivery.Compensation](cfg.Committer, checkpoint.Interval(200*time.Millisecond))
	stream.To(notified, stream.Sink[delivery.Compensation](ck), stream.Name("checkpoint"))
	if cfg.Metrics != nil {
		cfg.Metrics.Graph(g)
		cfg.Metrics.Async("undo", undo)
	}
	return g, nil
}
