package sensors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/quantile"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// Defaults of Config.
const (
	DefaultTopic           = "sensor-readings"
	DefaultDeadLetterTopic = "sensor-readings-dead-letters"
	DefaultNamespace       = "sensors"
	DefaultGroup           = "sensors"
	DefaultLateness        = 30 * time.Second
	DefaultWriters         = 8
	// DefaultMaxUnsettled is eight minutes of a partition's readings of
	// 100,000 homes with four sensors (25,000 a minute): a paused
	// partition resumes at half of it, which holds a minute and its
	// lateness, and the rest lets written minutes wait for a slow Redis.
	DefaultMaxUnsettled = 200_000
)

// WindowSize is the aggregation window: a minute of event time.
const WindowSize = time.Minute

// Config configures a Worker.
type Config struct {
	// Conn is the Kafka cluster.
	Conn kafka.Conn
	// Topic holds the readings (default DefaultTopic); DeadLetterTopic
	// receives malformed and late ones with their reason (default
	// DefaultDeadLetterTopic).
	Topic, DeadLetterTopic string
	// Redis keeps the ownership records, the checkpoints and the
	// aggregates. Required.
	Redis redis.UniversalClient
	// Namespace names the aggregates and the ownership records (default
	// DefaultNamespace); Group is the consumer group the ownership
	// records and checkpoints are kept under (default DefaultGroup).
	Namespace, Group string
	// InstanceID names this instance among the group's members: required
	// and unique (a pod name, host:pid).
	InstanceID string
	// Interval is the ownership renewal interval (default 10 s);
	// Expiration the lease (default 6 x Interval).
	Interval, Expiration time.Duration
	// Lateness is how long after its event time a reading may reach the
	// topic (default DefaultLateness); a minute is written once the
	// partition's stream time passed its end by as much.
	Lateness time.Duration
	// IdleClose writes a partition's open minutes when it received
	// nothing for this long (default: a minute plus the lateness).
	IdleClose time.Duration
	// Writers is how many minutes are written to Redis at once (default
	// DefaultWriters).
	Writers int
	// MaxUnsettledPerPartition is the source's (default
	// DefaultMaxUnsettled): it must exceed twice a minute and its lateness
	// of a partition's records, heartbeats included, as a paused partition
	// resumes only below half of it and the records from its open minutes'
	// first on must fit there.
	MaxUnsettledPerPartition int
	// Retention is how long a home's minutes are kept (default an hour).
	Retention time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// OnChange, if set, is told of each partition started or stopped here.
	OnChange func(ownership.Change)
	// Pipeline names the pipeline in its metrics and on /status (default
	// "sensors"): instances sharing a process need names of their own.
	Pipeline string
	// Metrics, if set, exports the pipeline's metrics (observe.New with
	// the pipeline's name): its stages', the ownership balancer's and the
	// Kafka source's (docs/metrics.md). Run registers the pipeline once
	// built.
	Metrics *observe.Metrics
}

func (c *Config) defaults() {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = DefaultDeadLetterTopic
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Pipeline == "" {
		c.Pipeline = "sensors"
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Expiration == 0 {
		c.Expiration = 6 * c.Interval
	}
	if c.Lateness == 0 {
		c.Lateness = DefaultLateness
	}
	if c.IdleClose == 0 {
		c.IdleClose = WindowSize + c.Lateness
	}
	if c.Writers == 0 {
		c.Writers = DefaultWriters
	}
	if c.MaxUnsettledPerPartition == 0 {
		c.MaxUnsettledPerPartition = DefaultMaxUnsettled
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Worker is one instance of the sensors pipeline.
type Worker struct {
	cfg    Config
	src    *kafka.Assigned
	bal    *ownership.Balancer[[]byte]
	owners *redisstore.Store
	store  *Store
	dl     *kgo.Client

	parsed, malformed, heartbeats, outOfRange, late atomic.Int64
	windows, written, kept, commands, retries       atomic.Int64
	readingsWritten                                 atomic.Int64
	storeDown, warnedPause                          atomic.Bool

	g *stream.Graph // the pipeline Run builds and runs

	unsentMu  sync.Mutex
	unsentAt  time.Time       // when unsentBy was asked
	unsentBy  map[int32]int64 // records not sent, per partition (kafka's Unsent)
	unsentErr time.Time       // when a failure to ask was last logged

	latMu sync.Mutex
	lat   []time.Duration // the latest write latencies, a ring
	latN  int
}

// New connects to Kafka (checking the topic), prepares the ownership
// balancer and returns a worker that owns no partition yet.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	cfg.defaults()
	switch {
	case cfg.Redis == nil:
		return nil, errors.New("sensors: Config.Redis is required")
	case cfg.InstanceID == "":
		return nil, errors.New("sensors: Config.InstanceID is required (unique per instance: a pod name, host:pid)")
	case cfg.Lateness < 0:
		return nil, fmt.Errorf("sensors: Config.Lateness %v must not be negative", cfg.Lateness)
	case cfg.Writers < 1:
		return nil, fmt.Errorf("sensors: Config.Writers %d must be at least 1", cfg.Writers)
	}
	store, err := NewStore(cfg.Redis, cfg.Namespace, cfg.Retention)
	if err != nil {
		return nil, err
	}
	owners, err := redisstore.New(redisstore.Config{Client: cfg.Redis, Namespace: cfg.Namespace, Stream: cfg.Topic,
		Group: cfg.Group, Expiration: cfg.Expiration})
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("instance", cfg.InstanceID)
	src, err := kafka.NewAssigned(ctx, kafka.AssignedConfig{Conn: cfg.Conn, Topic: cfg.Topic,
		MaxUnsettledPerPartition: cfg.MaxUnsettledPerPartition, Logger: log})
	if err != nil {
		return nil, err
	}
	bal, err := ownership.NewBalancer[[]byte](owners, src, ownership.Config{ID: cfg.InstanceID, Interval: cfg.Interval,
		Logger: log, OnChange: cfg.OnChange})
	if err != nil {
		src.Close()
		return nil, err
	}
	dl, err := kgo.NewClient(append(cfg.Conn.ClientOpts(), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		src.Close()
		return nil, err
	}
	return &Worker{cfg: cfg, src: src, bal: bal, owners: owners, store: store, dl: dl, lat: make([]time.Duration, 4096),
		g: stream.New(stream.WithPipeline(cfg.Pipeline), stream.WithLogger(cfg.Logger))}, nil
}

// Graph returns the worker's pipeline, built by Run, for observe's /status.
func (w *Worker) Graph() *stream.Graph { return w.g }

// Store returns the aggregates' store.
func (w *Worker) Store() *Store { return w.store }

// Owners returns the ownership store (partitions' owners and checkpoints).
func (w *Worker) Owners() *redisstore.Store { return w.owners }

// Owned returns the partitions this instance holds.
func (w *Worker) Owned() []int32 {
	var ps []int32
	for _, l := range w.bal.Owned() {
		ps = append(ps, l.Partition)
	}
	slices.Sort(ps)
	return ps
}

// Run runs the pipeline until ctx ends or it fails, then writes the final
// checkpoints and relinquishes the partitions (with a context of its own:
// ctx is done by then) and closes the clients. A worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	defer w.dl.Close()
	defer w.src.Close()
	g := w.g
	records := stream.From(g, stream.Source[[]byte](w.bal), stream.Name("readings"))
	readings := stream.Via(records, stream.FlowFunc[[]byte, Reading](w.parse), stream.Name("parse"))
	kept := stream.Via(readings, flow.FilterMessages(w.keep), stream.Name("filter"))
	minutes := stream.Via(kept, flow.Tumbling(WindowSize,
		func(m *stream.Message[Reading]) string { return m.Value.Home },
		(*Reading).EventTime, (*Minute).Add,
		flow.Lateness(w.cfg.Lateness), flow.IdleClose(w.cfg.IdleClose), flow.IdleWhenHeld(w.caughtUp),
		flow.OnLate(func(*flow.LateError) { w.late.Add(1) })), stream.Name("window"))
	written := stream.Via(minutes, flow.MapAsync(w.cfg.Writers, w.write), stream.Name("write"))
	stream.To(written, checkpoint.New[flow.Windows[string, Minute]](w.bal), stream.Name("checkpoint"))
	// Dead letters carry the record's bytes as they came.
	raw := stream.Via(g.Failures(), flow.Map(func(f stream.Failure) (stream.Failure, error) {
		if r, ok := f.Value.(Reading); ok {
			f.Value = r.Raw
		}
		return f, nil
	}), stream.Name("raw"))
	stream.To(raw, kafkasink.NewDeadLetter(w.dl, w.cfg.DeadLetterTopic), stream.Name("dead-letters"))
	var err error
	if w.cfg.Metrics != nil {
		err = w.cfg.Metrics.Register(g)
	}
	if err == nil {
		err = g.Run(ctx)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cerr := w.bal.Close(cctx); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	return err
}

// Stats is a snapshot of a worker's counters.
type Stats struct {
	// Readings parsed; Malformed (dead-lettered); Heartbeats and
	// OutOfRange (filtered); Late (dead-lettered by the window).
	Parsed, Malformed, Heartbeats, OutOfRange, Late int64
	// Windows written (a partition's minute each), aggregates Written and
	// Kept (the stored one covered more), Redis script calls (Commands)
	// sent: one per HomesPerCall homes of a minute, one for its totals; write
	// Retries, and the readings in the windows written.
	Windows, Written, Kept, Commands, Retries, Readings int64
	// WriteP99 is the 99th percentile of the time from a window's close to
	// its write, over the latest 4,096 windows.
	WriteP99 time.Duration
	// StoreDown is set while window writes fail past a second of backoff.
	StoreDown bool
	// Partitions held (their lag: Worker.Lag).
	Partitions []int32
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	st := Stats{Parsed: w.parsed.Load(), Malformed: w.malformed.Load(), Heartbeats: w.heartbeats.Load(),
		OutOfRange: w.outOfRange.Load(), Late: w.late.Load(), Windows: w.windows.Load(), Written: w.written.Load(),
		Kept: w.kept.Load(), Commands: w.commands.Load(), Retries: w.retries.Load(), Readings: w.readingsWritten.Load(),
		StoreDown: w.storeDown.Load(), Partitions: w.Owned()}
	w.latMu.Lock()
	n := min(w.latN, len(w.lat))
	lat := slices.Clone(w.lat[:n])
	w.latMu.Unlock()
	if n > 0 {
		st.WriteP99 = quantile.Of(lat, 0.99)
	}
	return st
}
