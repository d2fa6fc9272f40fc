package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/logx"
	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A failed copy of a request ends in exactly one of these: only malformed
// and invalid requests are dead letters; a transient failure that
// outlasted the retries is parked and replayed; a request that failed for
// good goes to the supervisor, unless another copy of it completed (a
// duplicate, a replay after a crash) or a compensation already ran: then
// this copy's failure is no outcome of the request and is settled quietly.
type verdict int

const (
	deadLetter verdict = iota
	park
	compensate
	alreadyDelivered
	alreadyCancelled
)

var verdictStage = [...]string{"dead-letters", "park", "compensation-events", "already-delivered", "already-cancelled"}

// judged is a failed copy with the parkings it had before, when it first
// failed, the replay delay its parkings call for, and its verdict.
type judged struct {
	stream.Failure
	parked  int
	first   time.Time     // its first failure (a replay's, from its parking), for DefaultHorizon
	backoff time.Duration // the replay delay of its next parking, by its parkings before
	verdict verdict
	key     string // the record's, for the log (at most 256 bytes of it)
}

// ErrDeadline is wrapped by the reason of a request compensated because
// its failure, transient, lasted until it could no longer complete before
// its deadline (or, without one, within SchedulerConfig.DefaultHorizon of
// its first failure).
var ErrDeadline = errors.New("the request can no longer complete before its deadline")

// ErrOutOfParkings is wrapped by the reason of a request compensated
// because its transient failure outlasted SchedulerConfig.MaxParkings
// parkings.
var ErrOutOfParkings = errors.New("the request was parked as many times as allowed")

// judge decides the verdict of each failure. A transient failure is
// parked, to be replayed, for as long as the request can still complete
// before its deadline; then it is compensated. For a request that failed
// for good it asks the deliveries service whether another copy completed
// or a compensation ran; if the service cannot tell now, the request is
// parked while its deadline allows, else compensated (the supervisor's
// undos are harmless for what was never done, and a compensated request
// stays cancelled).
type judge struct {
	deliveries  Deliveries
	parkTopic   string // "" without parking
	maxParkings int    // 0: no bound but the deadline
	horizon     time.Duration
	// ahead is how long the steps of a replay take at most now: a request
	// replayed must have that left before its deadline.
	ahead func() time.Duration
	now   func() time.Time
}

// replayIn is a parked failure's error with the replay delay the judge
// chose for it (replayDelay reads it).
type replayIn struct {
	error
	delay time.Duration
}

func (e *replayIn) Unwrap() error { return e.error }

// replayDelay is the park sink's delay: the judge's, else backoff's.
func replayDelay(backoff func(*stream.Message[stream.Failure]) time.Duration) func(*stream.Message[stream.Failure]) time.Duration {
	return func(m *stream.Message[stream.Failure]) time.Duration {
		var r *replayIn
		if errors.As(m.Value.Err, &r) {
			return r.delay
		}
		return backoff(m)
	}
}

// replayAfter is how long a parked failure waits for its replay: what the
// service asked (a 429's or 503's Retry-After, on any attempt; the wait for
// an unknown outcome's mark to turn stale), 0 to 20% more so that
// requests told the same time do not come back together; else the
// parkings' delay, which doubles with each (a breaker open, a
// service that keeps failing). A wait whose end is known does not grow
// with the parkings: a request parked many times during an outage is not
// held a minute for a 1 s throttle after it.
func replayAfter(v *judged, now time.Time) time.Duration {
	wait := v.NotBefore.Sub(now) // a Retry-After of any attempt (a breaker it opened may have refused the last)
	if c := stream.Classify(v.Err); c.Reason == stream.ReasonThrottled {
		wait = max(wait, c.RetryAfter)
	}
	if wait <= 0 {
		return v.backoff
	}
	// Not capped by MaxReplayDelay: a replay before what the service asked
	// would meet its refusal again, and spend a parking on it. (The
	// deadline still bounds it; the replays behind it in its partition do
	// not wait for it: flow.AnyOrder.)
	return wait + time.Duration(rand.Float64()*0.2*float64(wait))
}

// deadline is when p's request must be done by: its own deadline, or
// DefaultHorizon after its first failure if it has none (zero, or a
// placeholder at or before the Unix epoch).
func (j *judge) deadline(p *Progress, v *judged) time.Time {
	if d := p.Request.Deadline; d.After(time.Unix(0, 0)) {
		return d
	}
	return v.first.Add(j.horizon)
}

// decide sets v's verdict, and, for a parking, the delay of its replay in
// its error; for a compensation that its deadline or its parkings forced,
// the reason says so.
func (j *judge) decide(ctx context.Context, v *judged) {
	p, ok := v.Value.(*Progress)
	if !ok {
		v.verdict = deadLetter // failed to parse or validate: the value is the record's bytes
		return
	}
	// slack is how long the replay may wait and still leave the request
	// the time its steps take before its deadline.
	deadline := j.deadline(p, v)
	slack := deadline.Sub(j.now()) - j.ahead()
	// parkable reports whether v can be parked, and if so sets its replay
	// delay; if not, and say, the reason why wraps its error (a transient
	// failure given up on: ErrOutOfParkings, ErrDeadline).
	parkable := func(say bool) bool {
		switch {
		case j.parkTopic == "":
			return false
		case j.maxParkings > 0 && v.parked >= j.maxParkings:
			if say {
				v.Err = fmt.Errorf("%w (%d): %w", ErrOutOfParkings, v.parked, v.Err)
			}
			return false
		case slack <= 0:
			if say {
				v.Err = fmt.Errorf("%w (%s, steps ahead %v): %w", ErrDeadline, deadline.UTC().Format(time.RFC3339),
					j.ahead().Round(time.Millisecond), v.Err)
			}
			return false
		}
		v.Err = &replayIn{error: v.Err, delay: min(replayAfter(v, j.now()), slack)}
		return true
	}
	if v.Transient {
		if parkable(true) {
			v.verdict = park
			return
		}
		v.verdict = compensate
		return
	}
	st, err := j.state(ctx, p.Request.ID)
	switch {
	case err != nil && stream.Classify(err).Transient && parkable(false):
		// The service cannot tell now: ask again on a replay. One that
		// refuses the question for good is not asked again. Compensated
		// otherwise, the request keeps the refusal for its reason.
		v.verdict = park
	case err != nil:
		v.verdict = compensate
	case st == Delivered:
		v.verdict = alreadyDelivered
	case st == Cancelled:
		v.verdict = alreadyCancelled
	default:
		v.verdict = compensate
	}
}

// state asks the deliveries service, retrying a few times within 2 s.
func (j *judge) state(ctx context.Context, id string) (st DeliveryState, err error) {
	wait := 20 * time.Millisecond
	for range 5 {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err = j.deliveries.State(cctx, id)
		cancel()
		if err == nil || !stream.Classify(err).Transient {
			return st, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		wait *= 2
	}
	return st, err
}

// routeFailures connects the pipeline's failures to where they end:
//
//	failures -> judge-failures -> route-failures -> dead-letters
//	                                             -> park (ParkTopic, replayed)
//	                                             -> compensation-events (FailuresTopic)
//	                                             -> already-delivered, already-cancelled (settled)
func routeFailures(g *stream.Graph, cfg SchedulerConfig, ahead func() time.Duration, recovered *backpressure.Recovery) {
	j := &judge{deliveries: cfg.Backends.Deliveries, maxParkings: cfg.MaxParkings, horizon: cfg.DefaultHorizon,
		ahead: ahead, now: time.Now}
	if cfg.Replay != nil {
		j.parkTopic = cfg.ParkTopic
	}
	backoff := kafkasink.BackoffRestarting(cfg.ParkTopic, cfg.ReplayAfter, cfg.MaxReplayDelay, recovered.At)
	// The parkings a failed copy had come from its envelope (a replay from
	// the park topic counts them), which MapAsync's function does not see.
	prepared := stream.Via(g.Failures(), stream.FlowFunc[stream.Failure, judged](func(ctx context.Context,
		in *stream.Inlet[stream.Failure], out *stream.Outlet[judged]) error {
		return stage.Loop(ctx, in, func(b *stream.Batch[stream.Failure]) (bool, error) {
			for _, m := range b.Items {
				if m.Topic != j.parkTopic || j.parkTopic == "" {
					m.Headers = kafkasink.WithoutFailureHeaders(m.Headers, HeaderProgress, HeaderParkedProgress, HeaderReencoded, HeaderCause,
						kafkasink.HeaderReplayed, kafkasink.HeaderReplayedTo)
				} else if m.Header(HeaderParkedProgress) != nil {
					// A replay's steps done, as it was parked: its Progress
					// has them now, with the steps it did since, which its
					// compensation event (HeaderProgress) or its next
					// parking carries.
					m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h stream.Header) bool { return h.Key == HeaderParkedProgress })
				}
				v := judged{Failure: m.Value, parked: kafkasink.Parkings(&m.Envelope, j.parkTopic), key: string(m.Key[:min(len(m.Key), MaxIDLen)]),
					first: firstFailure(&m), backoff: backoff(&m)}
				if err := out.Send(ctx, stream.WithValue(m, v)); err != nil {
					return false, err
				}
			}
			return false, nil
		})
	}), stream.Name("failures"))
	// On the failure path a stage has nowhere to fail to: decide returns
	// no error (a panic in it, a bug, stops the pipeline with the failure
	// unsettled).
	logged := logx.NewLimited(cfg.Logger, time.Second, 10)
	decided := stream.Via(prepared, flow.MapAsync(judgeCalls, func(ctx context.Context, v judged) (judged, error) {
		j.decide(ctx, &v)
		logVerdict(ctx, logged, v)
		return v, nil
	}), stream.Name("judge-failures"))
	outs, _ := stream.Route(decided, len(verdictStage), func(v judged) (int, error) { return int(v.verdict), nil },
		stream.Name("route-failures"))
	failure := func(v judged) (stream.Failure, error) { return v.Failure, nil }
	to := func(v verdict, k stream.Sink[stream.Failure], mapFn func(judged) (stream.Failure, error)) {
		f := stream.Via(outs[v], flow.Map(mapFn), stream.Name("to-"+verdictStage[v]))
		stream.To(f, k, stream.Name(verdictStage[v]))
	}
	to(deadLetter, kafkasink.NewDeadLetter(cfg.Producer, cfg.DeadLetterTopic), failure)
	to(compensate, kafkasink.NewFailureSink(cfg.Producer, compensationRecord(cfg.FailuresTopic)), failure)
	to(alreadyDelivered, sink.Discard[stream.Failure](), failure)
	to(alreadyCancelled, sink.Discard[stream.Failure](), failure)
	if j.parkTopic == "" {
		stream.To(outs[park], sink.Discard[judged](), stream.Name("park")) // never taken without parking
		return
	}
	// A parked request is its record's bytes as they came, with the steps
	// it did and what they found (HeaderParkedProgress, carryProgress): its
	// replay goes through every step, and those done return at once. One
	// too large for the park topic is re-encoded (compactRequest), never
	// cut short.
	raw := stream.Via(outs[park], stream.FlowFunc[judged, stream.Failure](func(ctx context.Context,
		in *stream.Inlet[judged], out *stream.Outlet[stream.Failure]) error {
		return stage.Loop(ctx, in, func(b *stream.Batch[judged]) (bool, error) {
			for _, m := range b.Items {
				f := m.Value.Failure
				p := f.Value.(*Progress)
				f.Value = p.Raw
				m.Headers = carryProgress(m.Headers, p)
				if err := out.Send(ctx, stream.WithValue(m, f)); err != nil {
					return false, err
				}
			}
			return false, nil
		})
	}), stream.Name("to-"+verdictStage[park]))
	stream.To(raw, kafkasink.NewParkingFunc(cfg.Producer, cfg.ParkTopic, replayDelay(backoff), kafkasink.WithCompact(compactRequest)),
		stream.Name(verdictStage[park]))
}

// firstFailure is when m's request first failed: its parking's record says
// for a replay, the failure itself otherwise.
func firstFailure(m *stream.Message[stream.Failure]) time.Time {
	if t := kafkasink.FirstFailure(&m.Envelope); !t.IsZero() {
		return t
	}
	if !m.Value.FirstFailure.IsZero() {
		return m.Value.FirstFailure
	}
	return time.Now()
}

// maxReason bounds the reason a compensation event carries.
const maxReason = 4 << 10

func capReason(r string) string {
	if len(r) <= maxReason {
		return r
	}
	return fmt.Sprintf("%s... (%d bytes, truncated)", strings.ToValidUTF8(r[:maxReason], ""), len(r))
}

// logVerdict tells an operator about each dead letter (Error: it needs
// them) and each compensation (Warn), with the request and the reason, a
// few lines a second per stage at most (the rest counted); parkings at
// Info.
func logVerdict(ctx context.Context, l *logx.Limited, v judged) {
	var level slog.Level
	var msg string
	switch v.verdict {
	case deadLetter:
		level, msg = slog.LevelError, "request dead-lettered: it cannot be processed as it is"
	case compensate:
		level, msg = slog.LevelWarn, "request failed for good: compensating it"
	case park:
		level, msg = slog.LevelInfo, "request failed for now: parking it for a later replay"
	default:
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	if p, ok := v.Value.(*Progress); ok {
		attrs = append(attrs, slog.String("request", p.Request.ID))
	}
	attrs = append(attrs, slog.String("key", v.key), slog.String("stage", v.Stage), slog.String("reason", capReason(fmt.Sprint(v.Err))),
		slog.Int("parked_before", v.parked))
	l.Log(ctx, level, verdictStage[v.verdict]+"/"+v.Stage, msg, attrs...)
}
