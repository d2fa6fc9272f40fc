package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// ErrConfig is wrapped by every error of Config.Validate.
var ErrConfig = errors.New("supervisor: invalid configuration")

// Defaults of the parking fields of Config.
const (
	// DefaultReplayAfter is how long the first parking of a compensation
	// waits before its replay.
	DefaultReplayAfter = 5 * time.Second
	// DefaultMaxReplayDelay caps the replay delay, which doubles with every
	// parking: a booking stays undone at most this long after the service
	// is back, even when nothing else shows that it is (a compensation
	// parked because the undos' breaker was open is replayed as soon as
	// it closes).
	DefaultMaxReplayDelay = 30 * time.Second
	// DefaultMaxParkings is how many times a compensation is parked before
	// a transient failure of it counts as permanent: 0, no bound — an undo
	// that cannot be done now is retried, every DefaultMaxReplayDelay at
	// most, for as long as it takes (its drone stays booked meanwhile; the
	// parkings show in the metrics and the log).
	DefaultMaxParkings = 0
)

// Config wires the supervisor. Source, Committer, Backends and Notifier
// are required. The parking fields — Producer, RetryTopic,
// DeadLetterTopic, Replay and ReplayCommitter — go together: all set, or
// none.
//
// With them, nothing is lost: a compensation whose transient failure
// outlasts the retries of its stage is parked on RetryTopic and replayed
// by the supervisor itself (reading Replay) when due; one that fails for
// good — an undo refused (HTTP 4xx), a malformed event, a compensation out
// of parkings — is written to DeadLetterTopic with its reason and logged as
// an error. Without them, a compensation that cannot be done stops the
// pipeline with a fatal error naming the request and the undo, and leaves
// its event unsettled, so it is neither committed nor forgotten: the next
// run redoes it. Either way an event is committed only once its undos all
// succeeded, or once it is durably parked or dead-lettered.
type Config struct {
	// Source reads compensation events (the scheduler's failures topic);
	// Committer commits them (a *kafka.Source is both).
	Source    stream.Source[[]byte]
	Committer stream.Committer
	// Backends are the services whose side effects are undone.
	Backends delivery.Backends
	// Notifier records each compensated request.
	Notifier Notifier

	// Producer writes parked compensations to RetryTopic and dead letters
	// to DeadLetterTopic: a *kgo.Client (with the idempotent producer on,
	// franz-go's default), or a sink/redisstream Producer, which appends
	// each record to the Redis stream of its topic's name. Nil (a nil
	// *kgo.Client too): no parking (see Config).
	Producer kafkasink.Producer
	// RetryTopic receives parked compensations: the event's bytes, key and
	// headers as they came, plus the failure's reason, stage, attempts,
	// times, original position, replay time and HeaderParkings.
	RetryTopic string
	// DeadLetterTopic receives the compensations that cannot be done, in
	// the same form, for an operator.
	DeadLetterTopic string
	// Replay reads RetryTopic, in a consumer group of its own;
	// ReplayCommitter commits it (a *kafka.Source is both).
	Replay          stream.Source[[]byte]
	ReplayCommitter stream.Committer
	// ReplayAfter is the wait before a parked compensation is replayed the
	// first time; it doubles with each parking, up to MaxReplayDelay
	// (defaults DefaultReplayAfter and DefaultMaxReplayDelay). A replay
	// partition replays in order: a compensation due later holds back the
	// ones parked after it in its partition.
	ReplayAfter, MaxReplayDelay time.Duration
	// MaxParkings, if positive, is how many times a compensation is parked
	// before its next transient failure counts as permanent and it is
	// dead-lettered (default DefaultMaxParkings: no bound).
	MaxParkings int

	// Retry is the policy of the undo and notify calls (default
	// DefaultRetry).
	Retry *flow.RetryPolicy
	// Metrics, if set, receives the pipeline's metrics: New registers the
	// pipeline (observe.Metrics.Register).
	Metrics *observe.Metrics
	// TracerProvider, if set, traces each compensation
	// (stream.WithTracerProvider): the sources' receive spans continue the
	// trace of the failure event's traceparent header — the request's own,
	// as the scheduler wrote it — with a span per undo and notify call and,
	// with delivery.HTTPBackends, a span per HTTP attempt; parkings and
	// dead letters carry the trace on. Default nil: no tracing.
	TracerProvider trace.TracerProvider
	// Logger receives retries as warnings, parkings as warnings and dead
	// letters as errors (default slog.Default()).
	Logger *slog.Logger
	// DrainTimeout bounds the drain on cancel (default 10s). A parked
	// compensation waiting for its replay time is not drained: it stays
	// unsettled, to be replayed after a restart (flow.Delay lets go of it
	// when the pipeline is asked to stop).
	DrainTimeout time.Duration
}

// parks reports whether the configuration parks and dead-letters: it has a
// Producer, and not a nil *kgo.Client in the interface (a caller's client
// variable left nil means no parking, as it did when the field was a
// *kgo.Client).
func (c *Config) parks() bool {
	if cl, ok := c.Producer.(*kgo.Client); ok {
		return cl != nil
	}
	return c.Producer != nil
}

// Validate reports every missing or bad field, by name.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, fmt.Errorf("%w: %s %s", ErrConfig, field, reason)) }
	for _, f := range []struct {
		name  string
		unset bool
	}{
		{"Source", c.Source == nil}, {"Committer", c.Committer == nil}, {"Notifier", c.Notifier == nil},
		{"Backends.Deliveries", c.Backends.Deliveries == nil}, {"Backends.Drones", c.Backends.Drones == nil},
		{"Backends.Packages", c.Backends.Packages == nil},
	} {
		if f.unset {
			bad(f.name, "is required")
		}
	}
	parking := []struct {
		name string
		set  bool
	}{
		{"RetryTopic", c.RetryTopic != ""}, {"DeadLetterTopic", c.DeadLetterTopic != ""},
		{"Replay", c.Replay != nil}, {"ReplayCommitter", c.ReplayCommitter != nil},
	}
	for _, f := range parking {
		switch {
		case c.parks() && !f.set:
			bad(f.name, "is required with a Producer")
		case !c.parks() && f.set:
			bad(f.name, "is set but Producer is nil: set both or neither")
		}
	}
	if c.parks() && c.RetryTopic != "" && c.RetryTopic == c.DeadLetterTopic {
		bad("DeadLetterTopic", fmt.Sprintf("must differ from RetryTopic (both %q)", c.RetryTopic))
	}
	switch {
	case c.ReplayAfter < 0:
		bad("ReplayAfter", fmt.Sprintf("must not be negative, got %v", c.ReplayAfter))
	case c.MaxReplayDelay < 0:
		bad("MaxReplayDelay", fmt.Sprintf("must not be negative, got %v", c.MaxReplayDelay))
	case c.MaxReplayDelay > 0 && c.MaxReplayDelay < c.withDefaults().ReplayAfter:
		bad("MaxReplayDelay", fmt.Sprintf("%v is less than ReplayAfter %v (ReplayAfter defaults to %v)",
			c.MaxReplayDelay, c.withDefaults().ReplayAfter, DefaultReplayAfter))
	}
	if c.MaxParkings < 0 {
		bad("MaxParkings", fmt.Sprintf("must not be negative, got %d", c.MaxParkings))
	}
	if c.DrainTimeout < 0 {
		bad("DrainTimeout", fmt.Sprintf("must not be negative, got %v", c.DrainTimeout))
	}
	if c.Retry != nil {
		if err := c.Retry.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%w: Retry: %w", ErrConfig, err))
		}
	}
	return errors.Join(errs...)
}

// DefaultRetry is the policy of the undo and notify calls unless
// Config.Retry says otherwise: flow.Background with 10 attempts, at most
// 2 s apart, within a minute (undos must get through, they need not be
// fast), every HTTP 5xx transient (undos are idempotent DELETEs) besides
// 408 and 429.
func DefaultRetry() flow.RetryPolicy {
	p := flow.Background()
	p.MaxAttempts = 10
	p.MaxDelay = 2 * time.Second
	p.MaxElapsed = time.Minute
	if err := p.TransientStatus.UnmarshalText([]byte("408,429,500-599")); err != nil {
		panic(err) // the codes are constants
	}
	return p
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Retry == nil {
		p := DefaultRetry()
		c.Retry = &p
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ReplayAfter == 0 {
		c.ReplayAfter = DefaultReplayAfter
	}
	if c.MaxReplayDelay == 0 {
		c.MaxReplayDelay = max(DefaultMaxReplayDelay, c.ReplayAfter)
	}
	return c
}
