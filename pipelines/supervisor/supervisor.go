// Package supervisor is the compensating side of the delivery scheduler
// (scheduler-agent-supervisor): it reads compensation events — a request,
// the steps that succeeded, the reason it failed — and undoes every side
// effect of the request, all at once (delete the delivery, cancel the
// drone, delete the package), with its own retries, then records a
// notification for the owner.
//
// An undo that cannot be done now is never forgotten. A transient failure
// (a timeout, a refused connection, an HTTP 5xx: undos are idempotent
// DELETEs) that outlasts the retries is parked on a retry topic and
// replayed by the supervisor itself when due, the delay doubling with each
// parking up to a bound (30 s by default) — or at once, once an undo goes
// through after a run of failures: the services are back —, a bounded
// number of times if so configured; after that, or at once for a
// permanent failure (an undo answered 4xx, a malformed event), the event
// goes to a dead-letter topic with its reason, for an operator. An event
// is committed only once all its undos and its notification succeeded, or
// once it is durably parked or dead-lettered (the broker acknowledged the
// record). A supervisor configured without those topics stops instead of
// letting go of an event (see Config).
//
// Every undo is idempotent and Undo runs all of them each time, so a
// supervisor that crashes mid-compensation, or retries or replays one,
// changes nothing twice.
package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// event is a compensation event on its way: what it says, and the bytes
// it came as (its value: the request's record), which a parking or dead
// letter writes unchanged, with the record's headers.
type event struct {
	delivery.Compensation
	raw []byte
}

// parse decodes a compensation event (delivery.DecodeCompensation); one
// that does not decode, or names no request, is malformed.
func parse(b []byte, header func(string) []byte) (ev event, err error) {
	ev = event{raw: b}
	defer func() {
		if r := recover(); r != nil { // a decoder's bug is this event's failure, not the supervisor's end
			err = fmt.Errorf("malformed compensation event: %w", stream.NewPanicError(r))
		}
	}()
	if ev.Compensation, err = delivery.DecodeCompensation(b, header); err != nil {
		return ev, err
	}
	if ev.Progress.Request.ID == "" {
		return ev, fmt.Errorf("malformed compensation event: no request id")
	}
	return ev, nil
}

// parseStage is parse over messages, which reads their headers too; a
// malformed event fails its message.
func parseStage() stream.Flow[[]byte, event] {
	return stream.FlowFunc[[]byte, event](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[event]) error {
		return stage.Loop(ctx, in, func(b *stream.Batch[[]byte]) (bool, error) {
			for _, m := range b.Items {
				ev, err := parse(m.Value, m.Header)
				if err != nil {
					if err := in.Fail(ctx, m, err); err != nil {
						return false, err
					}
					continue
				}
				if err := out.Send(ctx, stream.WithValue(m, ev)); err != nil {
					return false, err
				}
			}
			return false, nil
		})
	})
}

// New builds the supervisor pipeline:
//
//	failures -> parse -> undo -> notify -> checkpoint
//	replays  -> replay-delay -> replay-parse -> replay-undo -> replay-notify -> replay-checkpoint
//	failed (any stage) -> triage -> split -> park (retry topic) | dead-letters
//
// The replays read the retry topic, each held until its replay time
// (flow.Delay with kafkasink.ReplayAt). Without parking (Config.Producer
// nil) there are no replays, and the failures end in a stage that stops
// the pipeline. A bad Config is an error wrapping ErrConfig that names
// every bad field.
func New(cfg Config) (*stream.Graph, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opts := []stream.Option{stream.WithPipeline("supervisor"), stream.WithLogger(cfg.Logger)}
	if cfg.DrainTimeout > 0 {
		opts = append(opts, stream.WithDrainTimeout(cfg.DrainTimeout))
	}
	if cfg.TracerProvider != nil {
		opts = append(opts, stream.WithTracerProvider(cfg.TracerProvider))
	}
	g := stream.New(opts...)
	// Once an undo goes through after a run of failures — the services
	// were down and are back — the compensations parked meanwhile are
	// replayed at once, not at their time.
	recovered := backpressure.NewRecovery()
	undone := recovered.Watch("undo", recoveryStreak)
	compensate(cfg, stream.From(g, cfg.Source, stream.Name("failures")), "", cfg.Committer, undone)
	if cfg.parks() {
		replays := stream.From(g, cfg.Replay, stream.Name("replays"))
		undoBack := func(stage string) time.Time {
			if stage == "undo" || stage == "replay-undo" {
				return recovered.At("undo")
			}
			return time.Time{}
		}
		due := stream.Via(replays, flow.Delay[[]byte](kafkasink.ReplayDue(undoBack), flow.Recheck(recovered.C())),
			stream.Name("replay-delay"))
		compensate(cfg, due, "replay-", cfg.ReplayCommitter, undone)

		t := &triage{retryTopic: cfg.RetryTopic, maxParkings: cfg.MaxParkings, log: cfg.Logger}
		failed := stream.Via(g.Failures(), t, stream.Name("triage"))
		transient, permanent := stream.Split(failed, func(f stream.Failure) bool { return f.Transient })
		park := kafkasink.NewParkingFunc(cfg.Producer, cfg.RetryTopic,
			kafkasink.BackoffRestarting(cfg.RetryTopic, cfg.ReplayAfter, cfg.MaxReplayDelay, undoBack),
			kafkasink.WithCompact(compactEvent))
		stream.To(transient, park, stream.Name("park"))
		dead := kafkasink.NewDeadLetter(cfg.Producer, cfg.DeadLetterTopic)
		stream.To(permanent, dead, stream.Name("dead-letters"))
	} else {
		stream.To(g.Failures(), stream.SinkFunc[stream.Failure](stopOnFailure), stream.Name("stop-on-failure"))
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// compensate adds parse -> undo -> notify -> checkpoint after events, the
// stages named with prefix, committing through c; each undo's outcome is
// told to report.
func compensate(cfg Config, events stream.Stream[[]byte], prefix string, c stream.Committer, report func(ok bool)) {
	b, n := cfg.Backends, cfg.Notifier
	parsed := stream.Via(events, parseStage(), stream.Name(prefix+"parse"))
	undo := flow.MapAsync(undoCalls, func(ctx context.Context, ev event) (event, error) {
		err := Undo(ctx, b, ev.Progress)
		report(err == nil)
		return ev, err
	}, append(callOptions(cfg), flow.TimeoutFromSend())...)
	undone := stream.Via(parsed, undo, stream.Name(prefix+"undo"))
	notify := flow.MapAsync(16, func(ctx context.Context, ev event) (event, error) {
		return ev, n.Notify(ctx, ev.Compensation)
	}, callOptions(cfg)...)
	notified := stream.Via(undone, notify, stream.Name(prefix+"notify"))
	ck := checkpoint.New[event](c, checkpoint.Interval(200*time.Millisecond))
	stream.To(notified, ck, stream.Name(prefix+"checkpoint"))
}

// undoCalls is the undos in flight of one compensate chain: what paces the
// replays released at once when the services are back.
const undoCalls = 64

// recoveryStreak is the undos failed in a row after which the next one to
// succeed says the services are back: an outage fails every undo, while
// undos failing now and then seldom fail 20 in a row.
const recoveryStreak = 20

// MaxCalls is the most calls to the backends a supervisor has in flight at
// once: the undos of the failures and of the replays, each compensation
// making its three undo calls at once (Undo). Size an HTTP client's
// connections to it (delivery.NewHTTPClient).
const MaxCalls = 2 * undoCalls * undosPerCompensation

// callOptions are the options of an undo or notify stage: the retry
// policy, its TransientStatus deciding HTTP statuses (5xx by default) in
// each part of a joined error (classifyWith), retries logged. The undo stage
// adds flow.TimeoutFromSend: the delivery backends say when each call is
// sent, so a busy supervisor makes an undo wait, not time out (a Notifier
// need not say, so notify is timed from its start).
func callOptions(cfg Config) []flow.AsyncOption {
	p := *cfg.Retry
	if p.TransientStatus.Empty() { // a policy that says nothing of statuses: the undos' own
		p.TransientStatus = DefaultRetry().TransientStatus
	}
	return []flow.AsyncOption{flow.Retry(p), flow.Classifier(func(err error) stream.Classification { return classifyWith(&p, err) })}
}
