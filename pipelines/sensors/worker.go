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
	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
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
	// of a partition's readings, as a paused partition resumes only below
	// half of it and its open minutes must fit there.
	MaxUnsettledPerPartition int
	// Retention is how long a home's minutes are kept (default an hour).
	Retention time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// OnChange, if set, is told of each partition started or stopped here.
	OnChange func(ownership.Change)
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
	writing                                         atomic.Int64 // window writes under way
	lastFailure                                     atomic.Int64 // Unix ns of the last failed write

	doneMu   sync.Mutex
	lastDone map[int32]time.Time // when a minute of each partition was last written

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
		lastDone: map[int32]time.Time{}, g: stream.New(stream.WithPipeline("sensors"), stream.WithLogger(cfg.Logger))}, nil
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
	err := g.Run(ctx)
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

// MaxClockAhead is how far after the worker's clock a record's timestamp
// (or, without one, its reading's event time) may be: further, the
// producer's clock is wrong and the reading is dead-lettered as malformed.
// The window takes the latest timestamp of a partition as its stream
// time, so one record an hour ahead would otherwise close the minutes
// being read, and every minute after them would wait for the idle close
// for that hour, their on-time readings dead-lettered as late.
const MaxClockAhead = WindowSize

func (w *Worker) parse(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[Reading]) error {
	return stage.ForEach(ctx, in, func(m *stream.Message[[]byte]) error {
		r, err := Parse(m.Key, m.Value)
		if err == nil {
			err = aheadOfClock(m.Timestamp, &r, time.Now())
		}
		if err != nil {
			w.malformed.Add(1)
			return in.Fail(ctx, *m, err)
		}
		w.parsed.Add(1)
		return out.Send(ctx, stream.WithValue(*m, r))
	})
}

// aheadOfClock returns why a reading arrived after now, or nil: the
// window's arrival is the record's timestamp, or the event time without
// one.
func aheadOfClock(ts time.Time, r *Reading, now time.Time) error {
	what, at := "the record's timestamp", ts
	if ts.IsZero() {
		what, at = "event time", r.EventTime()
	}
	if d := at.Sub(now); d > MaxClockAhead {
		return &ParseError{Reason: fmt.Sprintf("%s %s is %v ahead of the worker's clock (more than the %v allowed): the producer's clock is wrong",
			what, at.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), MaxClockAhead)}
	}
	return nil
}

// caughtUp reports whether a partition's quiet is idleness, for the
// window's idle close; held is how many of its readings the window holds
// open. It is true when its broker answers, every record the partition held a
// moment ago has been sent down the pipeline (kafka's Unsent, the log's
// end asked of the broker), and every reading sent and not yet settled is
// one the window holds: none is on its way to the window, being written
// or dead-lettered. A reader that fell behind, lost its broker or is held
// by its own unwritten minutes is not idle while the sensors go on
// sending, and closing its open minute early would dead-letter their
// on-time readings as late. The last fetch's Unread is not enough: after
// a Redis stall every partition resumes with a backlog, and a partition
// whose records wait in the source behind the others' for longer than
// IdleClose reads Unread 0 (its fetch brought them all). Nor is Unsent:
// records it counts as sent may wait in the pipes before the window, and
// a window that waited longer than IdleClose to hand on its minutes
// (Redis stalled) finds, when it goes on, every partition quiet for that
// long, whatever waits in its input.
//
// A partition paused for holding MaxUnsettledPerPartition readings is
// held by its minutes: while window writes are under way or failed
// lately (Redis slow or down), or one of its own minutes was written
// within IdleClose (its settles, which resume it, may still be on their
// way), they are what frees it, so it waits. Otherwise its open minutes
// hold more readings than the limit (a misconfiguration, logged): only
// the idle close can free it.
func (w *Worker) caughtUp(_ string, partition int32, held int) bool {
	st := w.src.Stats()
	if st.SinceContact > 2*time.Second {
		return false
	}
	for _, p := range st.Partitions {
		if p.Partition == partition && p.Paused {
			return w.pausedIdle(partition)
		}
	}
	if n, ok := w.unsent(partition); !ok || n != 0 {
		return false
	}
	// Asked after Unsent: a record sent before the broker's answer was
	// tracked before it was sent, and is unsettled now unless it was
	// settled downstream.
	for _, p := range w.src.Stats().Partitions {
		if p.Partition == partition {
			return p.Unsettled == held
		}
	}
	return false
}

// pausedIdle is caughtUp for a paused partition.
func (w *Worker) pausedIdle(partition int32) bool {
	if w.writing.Load() > 0 || time.Since(time.Unix(0, w.lastFailure.Load())) < w.cfg.IdleClose {
		return false
	}
	w.doneMu.Lock()
	done := w.lastDone[partition]
	w.doneMu.Unlock()
	if time.Since(done) < w.cfg.IdleClose {
		return false
	}
	if !w.warnedPause.Swap(true) {
		w.cfg.Logger.Warn("sensors: a partition's open minutes hold more readings than MaxUnsettledPerPartition; "+
			"closing them early, so their later readings are dead-lettered as late: raise MaxUnsettledPerPartition",
			"partition", partition, "max_unsettled", w.cfg.MaxUnsettledPerPartition)
	}
	return true
}

// unsent returns how many records of partition the source has not sent,
// from an answer of the broker at most an eighth of IdleClose (and at
// most a second) old, asked for again when older; false if the broker
// did not answer for the partition (then or at the last ask). Called by
// the window's goroutine only, once a partition is quiet: one request
// answers for every partition.
func (w *Worker) unsent(partition int32) (int64, bool) {
	w.unsentMu.Lock()
	defer w.unsentMu.Unlock()
	if time.Since(w.unsentAt) > min(w.cfg.IdleClose/8, time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), min(w.cfg.IdleClose/4, 2*time.Second))
		u, err := w.src.Unsent(ctx)
		cancel()
		if err != nil && time.Since(w.unsentErr) > time.Minute {
			w.unsentErr = time.Now()
			w.cfg.Logger.Warn("sensors: asking the broker where the partitions end failed; their idle minutes stay open", "err", err)
		}
		// A failure is cached too: asked again for each quiet partition,
		// a broker that does not answer would hold the window for a
		// timeout per partition.
		w.unsentBy, w.unsentAt = u, time.Now()
	}
	n, ok := w.unsentBy[partition]
	return n, ok
}

func (w *Worker) keep(m *stream.Message[Reading]) bool {
	switch {
	case m.Value.Kind == Heartbeat:
		w.heartbeats.Add(1)
		return false
	case !m.Value.InRange():
		w.outOfRange.Add(1)
		return false
	}
	return true
}

// write stores one partition's minute. Redis errors are retried with
// backoff for as long as the pipeline runs: nothing of the minute is
// settled before it is written, so while Redis is down the windows wait,
// the source stops fetching once they fill the pipes, and the balancer,
// which cannot renew its leases either, self-fences.
func (w *Worker) write(ctx context.Context, ws flow.Windows[string, Minute]) (flow.Windows[string, Minute], error) {
	w.writing.Add(1)
	defer w.writing.Add(-1)
	backoff := 50 * time.Millisecond
	for {
		res, err := w.storeWrite(ctx, &ws)
		if err == nil {
			w.storeDown.Store(false)
			w.doneMu.Lock()
			w.lastDone[ws.Partition] = time.Now()
			w.doneMu.Unlock()
			w.windows.Add(1)
			w.written.Add(int64(res.Written))
			w.kept.Add(int64(res.Kept))
			w.commands.Add(int64(res.Commands))
			w.readingsWritten.Add(int64(ws.Count))
			w.record(time.Since(ws.Emitted))
			ws.Panes = nil // written: let the aggregates go before the checkpoint
			return ws, nil
		}
		if ctx.Err() != nil {
			return ws, ctx.Err() // shutdown: left unsettled, replayed
		}
		w.retries.Add(1)
		w.lastFailure.Store(time.Now().UnixNano())
		if backoff >= time.Second && !w.storeDown.Swap(true) {
			w.cfg.Logger.Warn("sensors: Redis refuses window writes; the partition's readings wait unsettled",
				"partition", ws.Partition, "minute", ws.Start.UTC().Format(time.RFC3339), "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ws, ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// storeWrite writes ws, a panic turned into an error: write retries it,
// and the minute's readings stay unsettled (replayed by the next owner)
// rather than settled with a Windows message dead-lettered in their
// place.
func (w *Worker) storeWrite(ctx context.Context, ws *flow.Windows[string, Minute]) (res WriteResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sensors: writing partition %d's minute %s panicked: %v", ws.Partition, ws.Start.UTC().Format(time.RFC3339), v)
		}
	}()
	return w.store.Write(ctx, ws)
}

func (w *Worker) record(d time.Duration) {
	w.latMu.Lock()
	w.lat[w.latN%len(w.lat)] = d
	w.latN++
	w.latMu.Unlock()
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
