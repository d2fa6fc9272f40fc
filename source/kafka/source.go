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

	mu       sync.Mutex // guards parts and topicIDs; revoke and lose take it
	parts    map[tpKey]*partition
	topicIDs map[string][16]byte // learned from fetches, for commits by topic ID

	commitMu sync.Mutex // one commit at a time, revocation's included

	duplicates, late, pauses, commits, commitErrors atomic.Int64
	assignedN, revokedN, lostN                      atomic.Int64
	lastCommit                                      atomic.Int64 // ns
	records                                         atomic.Int64
	health                                          *health
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
	s := &Source{cfg: cfg, log: cfg.Logger.With("component", "kafka-source", "group", cfg.Group), parts: map[tpKey]*partition{},
		topicIDs: map[string][16]byte{}, health: newHealth(time.Now())}
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
		// Rebalance callbacks wait while a poll result is being tracked
		// (Run calls AllowRebalance right after), so every record is
		// tracked by the assignment that fetched it.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.WithHooks(s.health),
		kgo.WithLogger(NewLogger(cfg.Logger)),
	)
	if cfg.Regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, configError("Opts", "%v", err))
	}
	s.cl = cl
	if hb, ok := cl.OptValue(kgo.HeartbeatInterval).(time.Duration); ok && cfg.MaxBrokerLoss > 0 && cfg.MaxBrokerLoss < 3*hb {
		cl.Close()
		return nil, fmt.Errorf("%w: %w", ErrConfig, configError("MaxBrokerLoss",
			"%v must be at least 3 x the heartbeat interval (%v): an idle member talks to the cluster only that often", cfg.MaxBrokerLoss, hb))
	}
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
			return fmt.Errorf("kafka source: brokers %v: %w%s", s.cfg.Brokers, err, saslHint(err))
		}
		hint := ""
		if s.cfg.SASL != nil && errors.Is(err, io.EOF) {
			hint = " (SASL is configured: a broker that closes the connection right after connecting usually rejected the credentials, or its listener does not speak SASL)"
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: brokers %v did not answer within %v: %w%s", ErrBrokerUnreachable, s.cfg.Brokers, s.cfg.ConnectTimeout, err, hint)
		}
		return fmt.Errorf("%w: brokers %v: %w%s", ErrBrokerUnreachable, s.cfg.Brokers, err, hint)
	}
	if s.cfg.Regex {
		return nil
	}
	return unknownTopics(resp, s.cfg.Brokers)
}

// saslHint explains the error a listener without SASL gives a client
// that starts a SASL handshake.
func saslHint(err error) string {
	if errors.Is(err, kerr.IllegalSaslState) {
		return " (SASL is configured, and this listener probably does not speak SASL: check the port and its " +
			"security protocol, or connect without -sasl-mechanism)"
	}
	return ""
}

// unknownTopics returns the errors of a metadata response's topics: an
// error wrapping ErrUnknownTopic for each that does not exist.
func unknownTopics(resp *kmsg.MetadataResponse, brokers []string) error {
	var errs []error
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				errs = append(errs, fmt.Errorf("%w %q on brokers %v", ErrUnknownTopic, name, brokers))
				continue
			}
			errs = append(errs, fmt.Errorf("kafka: topic %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// CheckTopics asks the cluster cl talks to whether the topics exist, for
// the topics a pipeline writes to (dead letters, failure queues): checked
// at start, a missing one is a clear error before any input is read, not a
// stop at the first message that goes there. A missing topic is an error
// wrapping ErrUnknownTopic that names it; ctx bounds the request.
func CheckTopics(ctx context.Context, cl *kgo.Client, topics ...string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: checking topics %v: %w%s", topics, err, saslHint(err))
	}
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	return unknownTopics(resp, seeds)
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
	if err := s.commitParts(ctx, parts, true); err != nil {
		s.log.Warn("commit on revoke failed: their records will be processed again by the new owner", "err", err)
	}
	s.log.Info("partitions revoked", "partitions", revoked)
}

// lost forgets the partitions without committing: another member may own
// them already.
func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if len(lost) == 0 {
		// franz-go calls this with nothing to lose too (a member that
		// owns no partitions leaves or its session ends): not an event.
		return
	}
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
// error only if the source cannot go on: the client was closed, a fatal
// fetch error, or an outage longer than Config.MaxBrokerLoss or
// Config.MaxCommitFailure (errors wrapping ErrBrokerLost and
// ErrCommitsFailing), so that the worker ends and is restarted.
//
// Each poll result is tracked at once, while franz-go holds rebalances
// back (BlockRebalanceOnPoll), by the partition states of the assignment
// that fetched it; then rebalances are allowed again and the records are
// sent, which may wait for room downstream for as long as the pipeline is
// slow. A record whose assignment was revoked or lost meanwhile is not
// sent: it stays unsettled in that assignment's state, and whoever owns
// the partition now reads it again from the committed offset.
func (s *Source) Run(ctx context.Context, out *stream.Outlet[[]byte]) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		s.watch(cancel, stop)
	}()
	err := s.poll(runCtx, out)
	close(stop)
	<-watched
	if ctx.Err() == nil && runCtx.Err() != nil {
		return context.Cause(runCtx) // a limit was exceeded
	}
	return err
}

// poll is Run's loop.
func (s *Source) poll(ctx context.Context, out *stream.Outlet[[]byte]) error {
	var held []heldPartition
	for {
		fs := s.cl.PollRecords(ctx, s.cfg.MaxPollRecords)
		held = s.track(fs, held[:0])
		s.cl.AllowRebalance()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.IsClientClosed() {
			return errors.New("kafka source: client closed while the pipeline runs")
		}
		if err := s.fetchErrors(ctx, fs); err != nil {
			return err
		}
		for i := range held {
			if err := s.emit(ctx, &held[i], out); err != nil {
				return err
			}
			held[i] = heldPartition{}
		}
		if err := out.Flush(ctx); err != nil {
			return err
		}
	}
}

// heldPartition is the records of one partition from one poll, tracked by
// the assignment that fetched them.
type heldPartition struct {
	p     *partition
	recs  []*kgo.Record
	first int64 // seq of recs[0] in p
}

// track records every fetched record in the state of the partition's
// current assignment. Called between a poll and AllowRebalance, so that
// the assignment cannot change meanwhile.
func (s *Source) track(fs kgo.Fetches, held []heldPartition) []heldPartition {
	fs.EachTopic(func(ft kgo.FetchTopic) {
		if ft.TopicID != ([16]byte{}) {
			s.mu.Lock()
			s.topicIDs[ft.Topic] = ft.TopicID
			s.mu.Unlock()
		}
		for _, fp := range ft.Partitions {
			if len(fp.Records) == 0 {
				continue
			}
			s.mu.Lock()
			p := s.parts[tpKey{ft.Topic, fp.Partition}]
			s.mu.Unlock()
			if p == nil {
				continue // not ours any more: the new owner reads these
			}
			first, ok := p.track(fp.Records, fp.HighWatermark)
			if !ok {
				continue
			}
			s.records.Add(int64(len(fp.Records)))
			held = append(held, heldPartition{p: p, recs: fp.Records, first: first})
		}
	})
	return held
}

// fetchErrors logs transient fetch errors and returns the first one the
// source cannot go on after.
func (s *Source) fetchErrors(ctx context.Context, fs kgo.Fetches) error {
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
	return fatal
}

// emit sends the records of one partition from one poll. It stops, leaving
// the rest unsent and unsettled, if their assignment ends meanwhile.
func (s *Source) emit(ctx context.Context, h *heldPartition, out *stream.Outlet[[]byte]) error {
	for i := 0; i < len(h.recs); {
		dst, err := out.Free(ctx)
		if err != nil {
			return err
		}
		if h.p.isRevoked() {
			return nil
		}
		k := min(len(dst), len(h.recs)-i)
		for j, r := range h.recs[i : i+k] {
			m := &dst[j]
			m.Value = r.Value
			m.Envelope = stream.Envelope{Key: r.Key, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
			if len(r.Headers) > 0 {
				// kgo.RecordHeader and stream.Header have the same layout.
				m.Headers = unsafe.Slice((*stream.Header)(unsafe.Pointer(unsafe.SliceData(r.Headers))), len(r.Headers))
			}
			m.SetHandle(stream.NewHandle(h.p, h.first+int64(i+j)))
		}
		i += k
		if err := out.Extend(ctx, k); err != nil {
			return err
		}
	}
	// Pause after the sends, as before tracking moved to the poll: a
	// partition may exceed its cap by one poll, and pausing it before any
	// of the poll's records could settle cost 15% of the Kafka benchmark's
	// throughput in needless pause/resume round trips.
	if h.p.unsettled() >= s.cfg.MaxUnsettledPerPartition {
		h.p.flow()
	}
	return nil
}

// Ready reports whether the source can work: it has joined its consumer
// group, and the cluster is not failing (a request or dial failed and none
// was answered since, for longer than min(2 s, MaxBrokerLoss/2)). A
// member that has no partitions (more members than partitions, or waiting
// for others to rejoin) is ready: it takes partitions over as soon as the
// group gives it some. Mount it as a readiness check; it makes no request
// of its own.
func (s *Source) Ready(context.Context) error {
	if d, err := s.health.lostFor(time.Now()); d > s.cfg.readyLoss() {
		return fmt.Errorf("kafka source: requests failing for %v with no answer: %v", d.Round(time.Millisecond), err)
	}
	if _, gen := s.cl.GroupMetadata(); gen < 0 {
		return errors.New("kafka source: not in the consumer group yet")
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
	// SinceCommit is the time since a commit last succeeded (or found
	// nothing to commit), SinceContact since a broker last answered.
	SinceCommit, SinceContact time.Duration
}

// Stats returns a snapshot of the source's counters.
func (s *Source) Stats() Stats {
	st := Stats{
		Records: s.records.Load(), Commits: s.commits.Load(), CommitErrors: s.commitErrors.Load(),
		Pauses: s.pauses.Load(), LastCommit: time.Duration(s.lastCommit.Load()), Duplicates: s.duplicates.Load(),
		LateSettles: s.late.Load(),
		Assigned:    s.assignedN.Load(), Revoked: s.revokedN.Load(), Lost: s.lostN.Load(),
	}
	now := time.Now()
	st.SinceCommit = since(s.health.commitOK.Load(), now)
	st.SinceContact = s.health.quietFor(now)
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
