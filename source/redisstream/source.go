package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/logx"
)

// ErrUnreachable is wrapped by New's error when Redis did not answer
// within the client's dial timeout. A server that answers with a refusal
// (NOAUTH, WRONGPASS) is not unreachable: New's error then names the
// address and carries the server's answer.
var ErrUnreachable = errors.New("sluice: redis stream source: redis unreachable")

// ErrNoGroup is wrapped when a stream or its consumer group does not
// exist (Redis' NOGROUP): at New without Create, or because either was
// deleted while the source ran.
var ErrNoGroup = errors.New("sluice: redis stream source: no such stream or consumer group")

// Source reads one or more Redis streams as a member of a consumer group.
// Create it with New, add it to a pipeline with stream.From, and Close it
// after the pipeline's Run has returned. It is a stream.Committer: a
// checkpoint sink's Commit (or Close) waits for the acknowledgements of
// everything settled so far.
type Source struct {
	cfg     Config
	cl      redis.UniversalClient
	addr    string
	log     *slog.Logger
	limited *logx.Limited // warnings an outage repeats
	index   map[string]int32
	stage   atomic.Pointer[string] // the source's stage name, for dead letters

	// mu guards the entries held: read and not yet acknowledged.
	mu     sync.Mutex
	slots  []slot
	free   []uint32
	held   []map[string]uint32 // per stream: entry ID -> slot
	acks   [][]uint32          // per stream: slots settled, to acknowledge
	nAcks  int
	roomCh chan struct{} // a slot was freed (cap 1)
	ackCh  chan struct{} // settles wait for their acknowledgement (cap 1)

	ackMu sync.Mutex // one acknowledgement round trip at a time
	// tailMu guards the upkeep of the entries in flight once Run has
	// returned (startTail).
	tailMu   sync.Mutex
	tailStop context.CancelFunc
	tailDone chan struct{}
	running  atomic.Bool
	paused   atomic.Bool // PauseReading
	cursors  []string    // per stream: where the next XAUTOCLAIM resumes (Run's goroutine)

	health  health
	fatal   atomic.Pointer[error] // the error that ended Run, for Ready
	streams []streamCounters
	dupes   atomic.Int64
	readObs atomic.Pointer[func(float64)]
}

// slot is one entry held: read and not yet acknowledged.
type slot struct {
	id     string
	stream int32
	gen    uint32
	state  uint8
}

const (
	slotFree uint8 = iota
	slotInFlight
	slotSettled // waiting for its XACK
)

// streamCounters are one stream's numbers.
type streamCounters struct {
	read, acked, reclaimed, poison, deadLettered atomic.Int64
	pending, lag                                 atomic.Int64 // as of the last look (XINFO GROUPS)
}

// New checks the configuration, that Redis answers within the client's
// dial timeout, and that each stream has the group (creating it with
// Create), and returns the source.
func New(ctx context.Context, cfg Config) (*Source, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Source{
		cfg: cfg, cl: cfg.Client, addr: addrOf(cfg.Client), index: map[string]int32{},
		held: make([]map[string]uint32, len(cfg.Streams)), acks: make([][]uint32, len(cfg.Streams)),
		roomCh: make(chan struct{}, 1), ackCh: make(chan struct{}, 1),
		cursors: make([]string, len(cfg.Streams)), streams: make([]streamCounters, len(cfg.Streams)),
	}
	s.log = cfg.Logger.With("component", "redis-stream-source", "group", cfg.Group, "consumer", cfg.Consumer)
	s.limited = logx.NewLimited(s.log, time.Second, 5)
	for i, name := range cfg.Streams {
		s.index[name] = int32(i)
		s.held[i] = map[string]uint32{}
		s.cursors[i] = "0-0"
	}
	s.health.init()
	if err := s.ping(ctx); err != nil {
		return nil, err
	}
	for _, name := range cfg.Streams {
		if err := s.ensureGroup(ctx, name); err != nil {
			return nil, err
		}
	}
	if err := s.sameSlots(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// sameSlots checks, in a Redis Cluster, that each stream's dead-letter
// stream is in its hash slot: a dead letter is written in one script
// with the acknowledgement of its entry, and a cluster refuses a script
// whose keys are in two slots (CROSSSLOT), which would stop Run at the
// first entry to dead-letter.
func (s *Source) sameSlots(ctx context.Context) error {
	if _, ok := s.cl.(*redis.ClusterClient); !ok {
		return nil
	}
	var errs []error
	for _, name := range s.cfg.Streams {
		dl := s.cfg.deadLetter(name)
		a, err := s.cl.ClusterKeySlot(ctx, name).Result()
		if err != nil {
			return s.wrap("finding the hash slot of "+name, err)
		}
		b, err := s.cl.ClusterKeySlot(ctx, dl).Result()
		if err != nil {
			return s.wrap("finding the hash slot of "+dl, err)
		}
		if a != b {
			errs = append(errs, configError("DeadLetter",
				"dead-letter stream %q is in hash slot %d, stream %q in %d: a cluster needs both in one slot (a hash tag: stream {%s}, whose default dead-letter stream is {%s}-dead-letters)",
				dl, b, name, a, name, name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// ping checks, within the client's dial timeout, that Redis answers.
func (s *Source) ping(ctx context.Context) error {
	d := dialTimeout(s.cl)
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := s.cl.Ping(pctx).Err(); err != nil {
		var re redis.Error
		if errors.As(err, &re) && isFatal(err) {
			// It answered, with a refusal: no network problem to look for.
			return fmt.Errorf("sluice: redis stream source: redis at %s refused the connection%s: %w", s.addr, authHint(err), err)
		}
		return fmt.Errorf("%w: redis at %s did not answer within %v: %w", ErrUnreachable, s.addr, d, err)
	}
	return nil
}

// authHint points a refused login at the client's options.
func authHint(err error) string {
	if redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") {
		return " (a password missing or wrong: the client's Username and Password)"
	}
	return ""
}

func dialTimeout(c redis.UniversalClient) time.Duration {
	var d time.Duration
	switch c := c.(type) {
	case *redis.Client:
		d = c.Options().DialTimeout
	case *redis.ClusterClient:
		d = c.Options().DialTimeout
	case *redis.Ring:
		d = c.Options().DialTimeout
	}
	if d <= 0 {
		d = 5 * time.Second // go-redis' default
	}
	return d
}

// ensureGroup creates the group of stream name (Create), or checks that
// it exists.
func (s *Source) ensureGroup(ctx context.Context, name string) error {
	if s.cfg.Create {
		err := s.cl.XGroupCreateMkStream(ctx, name, s.cfg.Group, s.cfg.StartID).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("sluice: redis stream source: creating group %q of stream %q at %s: %s%w", s.cfg.Group, name, s.addr, s.notAStream(ctx, name, err), err)
		}
		return nil
	}
	groups, err := s.cl.XInfoGroups(ctx, name).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return fmt.Errorf("%w: no stream %q at %s, so no group %q (create both with XGROUP CREATE %s %s 0 MKSTREAM, or set Config.Create)",
				ErrNoGroup, name, s.addr, s.cfg.Group, name, s.cfg.Group)
		}
		return fmt.Errorf("sluice: redis stream source: looking for group %q of stream %q at %s: %s%w", s.cfg.Group, name, s.addr, s.notAStream(ctx, name, err), err)
	}
	for _, g := range groups {
		if g.Name == s.cfg.Group {
			return nil
		}
	}
	return s.noGroup(name)
}

// notAStream explains a WRONGTYPE answer about the stream name: the key
// holds something else, and its type says what ("" for another error).
func (s *Source) notAStream(ctx context.Context, name string, err error) string {
	if !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return ""
	}
	typ, terr := s.cl.Type(ctx, name).Result()
	if terr != nil || typ == "stream" || typ == "none" {
		return "the key is not a stream: "
	}
	return fmt.Sprintf("key %q holds a %s, not a stream (another name in Streams, or remove the key): ", name, typ)
}

// noGroup is the error of a stream or group that does not exist.
func (s *Source) noGroup(name string) error {
	return fmt.Errorf("%w: stream %q has no group %q at %s (create it with XGROUP CREATE %s %s 0 MKSTREAM, or set Config.Create)",
		ErrNoGroup, name, s.cfg.Group, s.addr, name, s.cfg.Group)
}

// Name returns "redis-stream".
func (s *Source) Name() string { return "redis-stream" }

// Topics returns the streams the source reads (source.Priority refuses two
// levels that read the same one).
func (s *Source) Topics() []string { return append([]string(nil), s.cfg.Streams...) }

// Config returns the effective configuration, defaults filled in.
func (s *Source) Config() Config { return s.cfg }

// Close acknowledges what is settled (Commit) and stops renewing the
// entries still in flight (after Run returns, those the pipeline drains
// are renewed until settled, for at most a minute); it releases nothing
// else: the client is the caller's. Call it after the pipeline's Run has
// returned; entries left unsettled stay pending, for this consumer to
// re-read when it starts again, or for another to take over after MinIdle.
func (s *Source) Close(ctx context.Context) error {
	s.stopTail()
	return s.Commit(ctx)
}
