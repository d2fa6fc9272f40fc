package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/logx"
	"github.com/sluice-streams/sluice/stream"
)

// Source consumes a consumer group's partitions. Create it with NewSource,
// add it to a pipeline with stream.From, give it to sink/checkpoint as the
// committer, and Close it after the pipeline's Run returns.
type Source struct {
	cfg     Config
	cl      *kgo.Client
	log     *slog.Logger
	limited *logx.Limited // for warnings an outage repeats

	mu    sync.Mutex // guards parts; revoke and lose take it
	parts map[tpKey]*partition

	commitMu sync.Mutex // one commit at a time, revocation's included

	duplicates, late, pauses, commits, commitErrors atomic.Int64
	assignedN, revokedN, lostN                      atomic.Int64
	lastCommit                                      atomic.Int64 // ns
	records                                         atomic.Int64
}

type tpKey struct {
	topic     string
	partition int32
}

// NewSource creates the client, checks within cfg.ConnectTimeout that a
// broker answers and that the topics exist, and returns the source. The
// group is joined when the pipeline runs.
func NewSource(ctx context.Context, cfg Config) (*Source, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, log: cfg.Logger.With("component", "kafka-source", "group", cfg.Group), parts: map[tpKey]*partition{}}
	s.limited = logx.NewLimited(s.log, time.Second, 5)
	balancer := cfg.Balancer
	if balancer == nil {
		balancer = kgo.CooperativeStickyBalancer()
	}
	reset := kgo.NewOffset().AtStart()
	if cfg.Start == Latest {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := append(cfg.ClientOpts(),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(balancer),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
		// A partition resumed after a pause joins the next fetch request,
		// which waits for the one in flight; when that one long-polls
		// partitions with nothing new, the resumed partition waits with
		// it. franz-go's 5 s default made a backlog behind a slow stage
		// drain 8x slower; 100 ms costs an idle consumer ten empty fetches
		// a second. Opts can set another.
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	)
	if cfg.Regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.cl = cl
	if err := s.check(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return s, nil
}

// check asks the cluster for the topics' metadata: it proves a broker is
// reachable (and accepts the credentials) and that the topics exist.
func (s *Source) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	if !s.cfg.Regex {
		for _, t := range s.cfg.Topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		var kerrErr *kerr.Error
		if errors.As(err, &kerrErr) {
			// The broker answered with an error (authentication, ACLs).
			return fmt.Errorf("kafka source: brokers %v: %w", s.cfg.Brokers, err)
		}
		hint := ""
		if s.cfg.SASL != nil && errors.Is(err, io.EOF) {
			hint = " (SASL is configured: a broker that closes the connection right after connecting usually rejected the credentials)"
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: brokers %v did not answer within %v: %w%s", ErrBrokerUnreachable, s.cfg.Brokers, s.cfg.ConnectTimeout, err, hint)
		}
		return fmt.Errorf("%w: brokers %v: %w%s", ErrBrokerUnreachable, s.cfg.Brokers, err, hint)
	}
	if s.cfg.Regex {
		return nil
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("%w %q on brokers %v", ErrUnknownTopic, name, s.cfg.Brokers)
			}
			return fmt.Errorf("kafka source: topic %q: %w", name, err)
		}
	}
	return nil
}

// Name returns "kafka".
func (s *Source) Name() string { return "kafka" }

// Client returns the franz-go client, for what this package does not wrap.
func (s *Source) Client() *kgo.Client { return s.cl }

func (s *Source) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.assignedN.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range assigned {
		for _, p := range ps {
			s.parts[tpKey{t, p}] = newPartition(s, t, p)
		}
	}
	s.log.Info("partitions assigned", "partitions", assigned)
}

// revoked commits what is settled for the revoked partitions, then forgets
// them: later settles of their records are ignored (fenced).
func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	parts := s.forget(revoked)
	if len(parts) > 0 {
		s.revokedN.Add(1)
	}
	if len(parts) == 0 {
		return
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.commitParts(ctx, parts); err != nil {
		s.log.Warn("commit on revoke failed: their records will be processed again by the new owner", "err", err)
	}
	s.log.Info("partitions revoked", "partitions", revoked)
}

// lost forgets the partitions without committing: another member may own
// them already.
func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.lostN.Add(1)
	s.forget(lost)
	s.log.Warn("partitions lost: nothing committed for them", "partitions", lost)
}

// forget marks the partitions revoked under their settle lock and resumes
// any that were paused.
func (s *Source) forget(tps map[string][]int32) []*partition {
	var parts []*partition
	s.mu.Lock()
	for t, ps := range tps {
		for _, p := range ps {
			k := tpKey{t, p}
			if st := s.parts[k]; st != nil {
				st.mu.Lock()
				st.revoked = true
				st.mu.Unlock()
				parts = append(parts, st)
				delete(s.parts, k)
			}
		}
	}
	s.mu.Unlock()
	for _, p := range parts {
		p.flow()
	}
	return parts
}

// Run polls records and emits them until ctx is cancelled. It returns an
// error only if the client cannot go on (closed, fatal group error).
func (s *Source) Run(ctx context.Context, out *stream.Outlet[[]byte]) error {
	for {
		fs := s.cl.PollRecords(ctx, s.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.IsClientClosed() {
			return errors.New("kafka source: client closed while the pipeline runs")
		}
		var fatal error
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			var ge *kgo.ErrGroupSession
			if errors.As(err, &ge) {
				s.limited.Log(ctx, slog.LevelWarn, "group", "group session error; partitions will be reassigned", slog.Any("err", err))
				return
			}
			if kerr.IsRetriable(err) || errors.Is(err, kerr.UnknownTopicOrPartition) {
				s.limited.Log(ctx, slog.LevelWarn, "fetch", "transient fetch error", slog.String("topic", t),
					slog.Int("partition", int(p)), slog.Any("err", err))
				return
			}
			if fatal == nil {
				fatal = fmt.Errorf("kafka source: fetching %s/%d: %w", t, p, err)
			}
		})
		if fatal != nil {
			return fatal
		}
		var err error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if err == nil && len(fp.Records) > 0 {
				err = s.emit(ctx, fp, out)
			}
		})
		if err != nil {
			return err
		}
		if err := out.Flush(ctx); err != nil {
			return err
		}
	}
}

// emit tracks and sends the records of one fetched partition.
func (s *Source) emit(ctx context.Context, fp kgo.FetchTopicPartition, out *stream.Outlet[[]byte]) error {
	s.mu.Lock()
	p := s.parts[tpKey{fp.Topic, fp.Partition}]
	s.mu.Unlock()
	if p == nil {
		return nil // revoked since the fetch: the new owner reads these
	}
	first, ok := p.track(fp.Records)
	if !ok {
		return nil
	}
	p.mu.Lock()
	p.hwm = fp.HighWatermark
	p.mu.Unlock()
	s.records.Add(int64(len(fp.Records)))
	for i := 0; i < len(fp.Records); {
		dst, err := out.Free(ctx)
		if err != nil {
			return err
		}
		k := min(len(dst), len(fp.Records)-i)
		for j, r := range fp.Records[i : i+k] {
			m := &dst[j]
			m.Value = r.Value
			m.Envelope = stream.Envelope{Key: r.Key, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
			if len(r.Headers) > 0 {
				// kgo.RecordHeader and stream.Header have the same layout.
				m.Headers = unsafe.Slice((*stream.Header)(unsafe.Pointer(unsafe.SliceData(r.Headers))), len(r.Headers))
			}
			m.SetHandle(stream.NewHandle(p, first+int64(i+j)))
		}
		i += k
		if err := out.Extend(ctx, k); err != nil {
			return err
		}
	}
	if p.unsettled() >= s.cfg.MaxUnsettledPerPartition {
		p.flow()
	}
	return nil
}

// Commit commits, for every partition this member owns, the offset below
// which all delivered records are settled, if it advanced. It implements
// stream.Committer.
func (s *Source) Commit(ctx context.Context) error {
	s.mu.Lock()
	parts := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitParts(ctx, parts)
}

// commitParts commits the given partitions' settled offsets synchronously.
// Called with commitMu held.
func (s *Source) commitParts(ctx context.Context, parts []*partition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	type pending struct {
		p   *partition
		off int64
	}
	var todo []pending
	for _, p := range parts {
		p.mu.Lock()
		off := p.commitOffset()
		epoch := p.epoch
		if off > p.committed {
			if offsets[p.topic] == nil {
				offsets[p.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[p.topic][p.partition] = kgo.EpochOffset{Epoch: epoch, Offset: off}
			todo = append(todo, pending{p, off})
		}
		p.mu.Unlock()
	}
	if len(todo) == 0 {
		return nil
	}
	began := time.Now()
	var cerr error
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if e := kerr.ErrorForCode(pr.ErrorCode); e != nil && cerr == nil {
					cerr = fmt.Errorf("%s/%d: %w", t.Topic, pr.Partition, e)
				}
			}
		}
	})
	s.lastCommit.Store(int64(time.Since(began)))
	if cerr != nil {
		s.commitErrors.Add(1)
		return fmt.Errorf("kafka source: commit: %w", cerr)
	}
	s.commits.Add(1)
	for _, t := range todo {
		t.p.mu.Lock()
		if t.off > t.p.committed {
			t.p.committed = t.off
		}
		t.p.mu.Unlock()
		if s.cfg.OnCommit != nil {
			s.cfg.OnCommit(t.p.topic, t.p.partition, t.off)
		}
	}
	return nil
}

// Ready reports whether the source can work: a broker answers and this
// member has partitions assigned. Mount it as a readiness check.
func (s *Source) Ready(ctx context.Context) error {
	if err := s.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka source: no broker answers: %w", err)
	}
	s.mu.Lock()
	n := len(s.parts)
	s.mu.Unlock()
	if n == 0 {
		return errors.New("kafka source: no partitions assigned yet")
	}
	return nil
}

// Close commits what is settled, leaves the group and closes the client.
// Call it after the pipeline's Run has returned.
func (s *Source) Close(ctx context.Context) error {
	err := s.Commit(ctx)
	s.cl.Close()
	return err
}

// PartitionStats describes one assigned partition.
type PartitionStats struct {
	Topic     string
	Partition int32
	// Committed is the last offset this member committed (-1: none yet).
	Committed int64
	// Unsettled counts records delivered and not yet settled.
	Unsettled int
	// Lag is the high watermark of the last fetch minus Committed.
	Lag    int64
	Paused bool
}

// Stats is a snapshot of the source.
type Stats struct {
	Partitions []PartitionStats
	// Records counts records emitted; Commits and CommitErrors commit
	// calls; LastCommit is the latency of the latest; Pauses counts
	// partitions paused for holding too many unsettled records.
	Records, Commits, CommitErrors, Pauses int64
	LastCommit                             time.Duration
	// Duplicates counts settles of a record already settled; LateSettles
	// settles that arrived after their partition was revoked (ignored).
	Duplicates, LateSettles int64
	// Assigned, Revoked and Lost count rebalance events of each kind.
	Assigned, Revoked, Lost int64
}

// Stats returns a snapshot of the source's counters.
func (s *Source) Stats() Stats {
	st := Stats{
		Records: s.records.Load(), Commits: s.commits.Load(), CommitErrors: s.commitErrors.Load(),
		Pauses: s.pauses.Load(), LastCommit: time.Duration(s.lastCommit.Load()), Duplicates: s.duplicates.Load(),
		LateSettles: s.late.Load(),
		Assigned:    s.assignedN.Load(), Revoked: s.revokedN.Load(), Lost: s.lostN.Load(),
	}
	s.mu.Lock()
	parts := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	for _, p := range parts {
		p.mu.Lock()
		ps := PartitionStats{Topic: p.topic, Partition: p.partition, Committed: p.committed, Unsettled: p.n, Paused: p.paused.Load()}
		if p.committed >= 0 {
			ps.Lag = max(0, p.hwm-p.committed)
		}
		p.mu.Unlock()
		st.Partitions = append(st.Partitions, ps)
	}
	return st
}
