package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/stream"
)

// AssignedConfig configures an Assigned source.
type AssignedConfig struct {
	Conn
	// Topic is the one topic read. Required.
	Topic string
	// Start is where a partition started without an offset (no
	// checkpoint) begins: Earliest (the default) or Latest.
	Start StartOffset
	// StartTime, if set, overrides Start: a partition without an offset
	// begins at its first record whose timestamp is at or after it.
	StartTime time.Time
	// MaxUnsettledPerPartition, MaxPollRecords, Logger, Opts and
	// MaxBrokerLoss are as in Config.
	MaxUnsettledPerPartition int
	MaxPollRecords           int
	Logger                   *slog.Logger
	Opts                     []kgo.Opt
	MaxBrokerLoss            time.Duration
}

// Assigned reads the partitions of one topic that its caller assigns
// (Start) and takes away (Stop), without a consumer group: franz-go's
// direct consumption (ConsumePartitions), for a balancer of its own, such
// as source/ownership's, or a fixed layout. It delivers, settles, caps
// unsettled records per partition and pauses exactly as Source does (the
// same code), and reports for each partition the offset below which
// every delivered record is settled (Settled), for the caller to
// checkpoint where it keeps its checkpoints. It commits nothing to Kafka.
//
// Stop takes effect at once: no record of the partition is emitted after
// it returns but those being handed downstream at that instant, and
// settles of records delivered before it are ignored; Settled no longer
// reports the partition. Start takes effect at the source's next poll. A
// partition stopped and started again is a new assignment: records
// fetched under the old one are never delivered or settled under the new.
type Assigned struct {
	s *Source
	d *direct
}

// direct is the pending assignment changes of an Assigned source. They are
// applied by the poll loop between polls, so that the records of a poll
// always belong to the assignment they were fetched under: franz-go drops
// the buffered records of a partition it stops consuming, and a poll
// started after the change returns none of the old ones.
type direct struct {
	topic string
	start kgo.Offset

	mu     sync.Mutex
	ops    []assignOp
	cancel context.CancelFunc // wakes the poll in progress

	consuming map[int32]bool // partitions the client consumes; the poll loop's only

	gate func() // called after each poll, before its records are emitted
	at   func(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error)
}

type assignOp struct {
	partition int32
	start     bool
	offset    int64 // < 0: the configured start
}

// NewAssigned creates the client, checks within ConnectTimeout that a
// broker answers and the topic exists, and returns a source reading no
// partition yet.
func NewAssigned(ctx context.Context, cfg AssignedConfig) (*Assigned, error) {
	c := Config{Conn: cfg.Conn, Group: "-", Topics: []string{cfg.Topic}, Start: cfg.Start,
		MaxUnsettledPerPartition: cfg.MaxUnsettledPerPartition, MaxPollRecords: cfg.MaxPollRecords,
		Logger: cfg.Logger, Opts: cfg.Opts, MaxBrokerLoss: cfg.MaxBrokerLoss,
		MaxCommitFailure: -1} // commits are the caller's
	c.defaults()
	err := c.Validate()
	if cfg.Topic == "" {
		err = errors.Join(err, fmt.Errorf("%w: %w", ErrConfig, configError("Topic", "a topic is required")))
	}
	if err != nil {
		return nil, err
	}
	c.Group = ""
	start := kgo.NewOffset().AtStart()
	switch {
	case !cfg.StartTime.IsZero():
		start = kgo.NewOffset().AfterMilli(cfg.StartTime.UnixMilli())
	case cfg.Start == Latest:
		start = kgo.NewOffset().AtEnd()
	}
	s := newState(c, c.Logger.With("component", "kafka-assigned", "topic", cfg.Topic))
	at := func(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
		return adm.ListStartOffsets(ctx, topic)
	}
	switch {
	case !cfg.StartTime.IsZero():
		ms := cfg.StartTime.UnixMilli()
		at = func(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, ms, topic)
		}
	case cfg.Start == Latest:
		at = func(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
			return adm.ListEndOffsets(ctx, topic)
		}
	}
	a := &Assigned{s: s, d: &direct{topic: cfg.Topic, start: start, consuming: map[int32]bool{}, at: at}}
	s.direct = a.d
	opts := append(c.ClientOpts(),
		kgo.FetchMaxWait(100*time.Millisecond), // as NewSource: a resumed partition waits for the fetch in flight
		kgo.WithHooks(s.health),
		kgo.WithLogger(NewLogger(c.Logger)),
	)
	if err := s.connect(opts); err != nil {
		return nil, err
	}
	if err := s.check(ctx); err != nil {
		s.cl.Close()
		return nil, err
	}
	return a, nil
}

// Name returns "kafka".
func (a *Assigned) Name() string { return "kafka" }

// Run polls the assigned partitions and emits their records until ctx is
// cancelled, as Source.Run does.
func (a *Assigned) Run(ctx context.Context, out *stream.Outlet[[]byte]) error {
	return a.s.Run(ctx, out)
}

// Client returns the franz-go client.
func (a *Assigned) Client() *kgo.Client { return a.s.cl }

// Close closes the client. Call it after the pipeline's Run has returned.
func (a *Assigned) Close() { a.s.cl.Close() }

// Stats returns a snapshot of the source's counters; Committed is always
// -1 (the caller checkpoints).
func (a *Assigned) Stats() Stats { return a.s.Stats() }

// Instrument publishes the source's metrics as Source.Instrument does.
func (a *Assigned) Instrument(stage string, m stream.Meter) { a.s.Instrument(stage, m) }

// Ready reports an error while the brokers have been failing (see
// Source.Ready).
func (a *Assigned) Ready(ctx context.Context) error { return a.s.Ready(ctx) }

// Lag returns the records waiting at the broker in the partitions read.
func (a *Assigned) Lag() int64 { return a.s.Lag() }

// Partitions returns the topic's partitions, from the cluster's metadata.
func (a *Assigned) Partitions(ctx context.Context) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(a.d.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.s.cl)
	if err != nil {
		return nil, fmt.Errorf("sluice: kafka: partitions of %s: %w", a.d.topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != a.d.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("sluice: kafka: partitions of %s: %w", a.d.topic, err)
		}
		ps := make([]int32, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ps = append(ps, p.Partition)
		}
		slices.Sort(ps)
		return ps, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, a.d.topic)
}

// StartOffsets returns the offset the configured start stands for now in
// each partition: the log start (Earliest), the log end (Latest), or the
// first record at or after StartTime (the log end if none is that
// recent). A caller that records it as the partition's first checkpoint
// before Start makes whoever reads the partition next begin there too.
// Partitions the broker could not answer for are left out of the map and
// named in the error; an error of a partition not asked for is ignored.
func (a *Assigned) StartOffsets(ctx context.Context, partitions []int32) (map[int32]int64, error) {
	listed, err := a.d.at(ctx, kadm.NewClient(a.s.cl), a.d.topic)
	if err != nil {
		return nil, fmt.Errorf("sluice: kafka: the start offsets of %s: %w", a.d.topic, err)
	}
	offs := make(map[int32]int64, len(partitions))
	var errs []error
	for _, p := range partitions {
		o, ok := listed.Lookup(a.d.topic, p)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("sluice: kafka: no start offset for %s/%d", a.d.topic, p))
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("sluice: kafka: the start offset of %s/%d: %w", a.d.topic, p, o.Err))
		case o.Offset < 0:
			errs = append(errs, fmt.Errorf("sluice: kafka: no start offset for %s/%d (%d)", a.d.topic, p, o.Offset))
		default:
			offs[p] = o.Offset
		}
	}
	return offs, errors.Join(errs...)
}

// Unsent is Source.Unsent for the source's topic.
func (a *Assigned) Unsent(ctx context.Context) (map[int32]int64, error) {
	return a.s.Unsent(ctx, a.d.topic)
}

// BeforeEmit makes the poll loop call f before it emits each batch of a
// poll's records (after waiting for room downstream); partitions f stops
// emit nothing more. Set
// it before Run (source/ownership's Balancer checks its self-fence
// deadline there).
func (a *Assigned) BeforeEmit(f func()) { a.d.gate = f }

// Start reads partition p from offset (the offset of the next record to
// deliver), or from the configured start if offset < 0. Starting a
// partition already read starts a new assignment of it at offset.
func (a *Assigned) Start(p int32, offset int64) {
	a.d.queue(assignOp{partition: p, start: true, offset: offset})
}

// Stop stops reading partition p at once (see Assigned).
func (a *Assigned) Stop(p int32) {
	a.s.forget(map[string][]int32{a.d.topic: {p}})
	a.d.queue(assignOp{partition: p})
}

// Settled returns the offset below which every record of partition p
// delivered in its current assignment is settled — where a new reader
// resumes — and false if p is not read or nothing was delivered yet.
func (a *Assigned) Settled(p int32) (int64, bool) {
	a.s.mu.Lock()
	st := a.s.parts[tpKey{a.d.topic, p}]
	a.s.mu.Unlock()
	if st == nil {
		return -1, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.revoked || (st.n == 0 && st.nextOff < 0) {
		return -1, false
	}
	return st.commitOffset(), true
}

func (d *direct) queue(op assignOp) {
	d.mu.Lock()
	d.ops = append(d.ops, op)
	if d.cancel != nil {
		d.cancel()
	}
	d.mu.Unlock()
}

// apply makes the queued changes, in order, and returns the context of the
// next poll, which a change queued meanwhile cancels (so that an idle poll
// does not hold it up). Called by the poll loop only.
func (d *direct) apply(ctx context.Context, s *Source) context.Context {
	d.mu.Lock()
	ops := d.ops
	d.ops = nil
	pctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	d.mu.Unlock()
	for _, op := range ops {
		// Whether stopped or started anew, the old assignment is forgotten
		// and the client stops consuming it (dropping what it buffered,
		// after the fetch in flight) before a new one starts.
		tp := map[string][]int32{d.topic: {op.partition}}
		s.forget(tp)
		if d.consuming[op.partition] {
			s.cl.RemoveConsumePartitions(tp)
			delete(d.consuming, op.partition)
		}
		if !op.start {
			continue
		}
		s.mu.Lock()
		s.parts[tpKey{d.topic, op.partition}] = newPartition(s, d.topic, op.partition, op.offset)
		s.mu.Unlock()
		at := d.start
		if op.offset >= 0 {
			at = kgo.NewOffset().At(op.offset)
		}
		s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{d.topic: {op.partition: at}})
		d.consuming[op.partition] = true
		s.assignedN.Add(1)
	}
	if len(ops) > 0 {
		s.log.Debug("assignment changed", "changes", len(ops))
	}
	return pctx
}

// polled releases the poll's context.
func (d *direct) polled() {
	d.mu.Lock()
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
	}
	d.mu.Unlock()
}
