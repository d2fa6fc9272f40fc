package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/logx"
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
	firstSettle                                     atomic.Int64 // unix ns of the first settle; 0: none yet
	commitCalled, warnedUncommitted                 atomic.Bool  // see warnUncommitted
	health                                          *health
	rejoin                                          rejoin  // this member's JoinGroup to SyncGroup, which commits wait for
	reading                                         reading // PauseReading's state
	direct                                          *direct // an Assigned source's pending changes; nil in a group

	// closing is closed when Close begins (closeOnce), after closeCtx is
	// set to Close's ctx: the pipeline has ended, so a revocation does not
	// wait for settles, and its commit is bounded by closeCtx.
	closing   chan struct{}
	closeOnce sync.Once
	closeCtx  context.Context
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
	s := newState(cfg, cfg.Logger.With("component", "kafka-source", "group", cfg.Group))
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
		kgo.WithHooks(s.health, &s.rejoin),
		kgo.WithLogger(NewLogger(cfg.Logger)),
	)
	if cfg.Regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	if cfg.Protocol == ProtocolConsumer {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if err := s.connect(opts); err != nil {
		return nil, err
	}
	cl := s.cl
	if bs, _ := cl.OptValue(kgo.Balancers).([]kgo.GroupBalancer); cfg.Protocol == ProtocolConsumer && len(bs) > 0 && !joinsConsumerProtocol(bs[0]) {
		cl.Close()
		return nil, fmt.Errorf("%w: %w", ErrConfig, configError("Opts",
			"a kgo.Balancers option overrides Balancer with a %T named %q, which franz-go joins with the classic protocol: under ProtocolConsumer set Balancer instead", bs[0], bs[0].ProtocolName()))
	}
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

// newState returns a source's state before its client exists.
func newState(cfg Config, log *slog.Logger) *Source {
	s := &Source{cfg: cfg, log: log, parts: map[tpKey]*partition{}, topicIDs: map[string][16]byte{}, health: newHealth(time.Now()),
		closing: make(chan struct{})}
	s.limited = logx.NewLimited(s.log, time.Second, 5)
	return s
}

// connect creates the client from the source's options followed by
// Config.Opts.
func (s *Source) connect(opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append(opts, s.cfg.Opts...)...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, configError("Opts", "%v", err))
	}
	s.cl = cl
	return nil
}

// check asks the cluster for the topics' metadata: it proves a broker is
// reachable (and accepts the credentials) and that the topics exist.

// Name returns "kafka".
func (s *Source) Name() string { return "kafka" }

// Client returns the franz-go client, for what this package does not wrap.
func (s *Source) Client() *kgo.Client { return s.cl }

// Close commits what is settled, leaves the group and closes the client.
// Call it after the pipeline's Run has returned. Leaving revokes every
// partition: as the pipeline has ended, nothing more will be settled, so
// that revocation does not wait HandoverWait (one in progress stops
// waiting), and its commit ends with ctx.
func (s *Source) Close(ctx context.Context) error {
	err := s.Commit(ctx)
	s.closeOnce.Do(func() {
		s.closeCtx = ctx
		close(s.closing)
	})
	s.cl.Close()
	return err
}

// revokeCtx returns the context a revocation commits with: ctx, ended
// too by Close's ctx once Close has begun.
func (s *Source) revokeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	select {
	case <-s.closing:
	default:
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closeCtx, cancel)
	return ctx, func() { stop(); cancel() }
}
