package sensors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// DemoConfig shapes a demo run: the whole workload in one process, on an
// embedded broker (kfake) and an embedded Redis (miniredis).
type DemoConfig struct {
	// Homes (default DefaultDemoHomes) and Kinds (default 3) shape the
	// load; Compression is simulated time per real time (default 60: a
	// simulated minute per second). Every simulated minute writes one
	// aggregate per home, each a run of the write script.
	Homes, Kinds int
	Compression  float64
	// AddKindAfter adds the next kind to every home after this much of
	// the run (default: midway through Duration; negative: never).
	AddKindAfter time.Duration
	// Malformed, Late and OutOfRange are the generator's shares (zero:
	// its defaults).
	Malformed, Late, OutOfRange float64
	// Duration is how long the load is sent (default 40 s): the whole
	// simulated minutes of Duration × Compression.
	Duration time.Duration
	// Partitions of the readings topic (default 16).
	Partitions int32
	// Instances started at first (default 3). The load starts once they
	// hold every partition between them. A third of the way through the
	// load the second one stops (gracefully) and two thirds of the way a
	// new one joins.
	Instances int
	// Interval and Expiration are the ownership renewal interval and the
	// lease (default 500 ms and 3 s: a member claims a partition per
	// round at start, so a short interval makes the start quick).
	Interval, Expiration time.Duration
	// IdleClose writes a partition's open minutes when it received
	// nothing for this long (default 2 s: the load is compressed).
	IdleClose time.Duration
	// Every is the status line's interval (default 1 s; negative: none).
	Every time.Duration
	// Drain bounds the wait, once the load is sent, for every partition's
	// checkpoint to reach the end of its log (default 60 s).
	Drain time.Duration
	// Listen, if set, serves the residents' page (/homes) there.
	Listen string
	// Logger receives the workers' logs (default: discarded).
	Logger *slog.Logger
}

// DefaultDemoHomes is the demo's default number of homes: at a simulated
// minute per second, 2,000 runs of the write script a second, which the
// embedded Redis keeps up with on two cores shared with everything else of
// the demo. (It runs each script in a Lua interpreter of its own, about
// 150 µs of CPU; at 3,000 homes its backlog grew on a busy machine.)
const DefaultDemoHomes = 2_000

func (c *DemoConfig) defaults() {
	if c.Homes == 0 {
		c.Homes = DefaultDemoHomes
	}
	if c.Kinds == 0 {
		c.Kinds = 3
	}
	if c.Compression == 0 {
		c.Compression = 60
	}
	if c.Duration == 0 {
		c.Duration = 40 * time.Second
	}
	if c.AddKindAfter == 0 {
		c.AddKindAfter = c.Duration / 2
	}
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.Instances == 0 {
		c.Instances = 3
	}
	if c.Interval == 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.Expiration == 0 {
		c.Expiration = 6 * c.Interval
	}
	if c.IdleClose == 0 {
		c.IdleClose = 2 * time.Second
	}
	if c.Every == 0 {
		c.Every = time.Second
	}
	if c.Drain == 0 {
		c.Drain = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate names what is wrong with c (after defaults).
func (c DemoConfig) Validate() error {
	c.defaults()
	switch {
	case c.Duration < 0:
		return fmt.Errorf("sensors: demo duration %v: want > 0", c.Duration)
	case c.Partitions < 1:
		return fmt.Errorf("sensors: demo partitions %d: want at least 1", c.Partitions)
	case c.Instances < 2:
		return fmt.Errorf("sensors: demo instances %d: want at least 2 (one of them stops)", c.Instances)
	case c.Interval < 0:
		return fmt.Errorf("sensors: demo interval %v: want > 0", c.Interval)
	case c.Expiration <= c.Interval:
		return fmt.Errorf("sensors: demo expiration %v: want more than the interval %v", c.Expiration, c.Interval)
	case c.IdleClose < 0 || c.Drain < 0:
		return fmt.Errorf("sensors: demo idle close %v, drain %v: want > 0", c.IdleClose, c.Drain)
	}
	if c.simMinutes() < 1 {
		return fmt.Errorf("sensors: demo duration %v at compression %v is less than a simulated minute", c.Duration, c.Compression)
	}
	return c.genConfig(time.Now()).Validate()
}

// simMinutes is the whole simulated minutes the load lasts.
func (c DemoConfig) simMinutes() int {
	return int(c.Duration.Seconds() * c.Compression / 60)
}

func (c DemoConfig) genConfig(now time.Time) GenConfig {
	// The simulated time ends before now, and an hour back at least,
	// so that the page's last hour shows the whole run.
	span := time.Duration(c.simMinutes()) * time.Minute
	gc := GenConfig{Homes: c.Homes, Kinds: c.Kinds, Compression: c.Compression, Malformed: c.Malformed, Late: c.Late,
		OutOfRange: c.OutOfRange, Start: now.Add(-max(time.Hour, span+time.Minute)).Truncate(time.Minute)}
	if c.AddKindAfter > 0 {
		gc.AddKindAfter = c.AddKindAfter
	}
	return gc
}

// DemoSummary is the outcome of a demo run.
type DemoSummary struct {
	Homes, Kinds, Minutes int
	// Sent counts the records produced; Valid, Malformed, Late,
	// OutOfRange and Heartbeats the readings by what they were sent as.
	Sent                                           int64
	Valid, Malformed, Late, OutOfRange, Heartbeats int64
	// Load is how long sending took; CaughtUp how long after it every
	// checkpoint reached its log's end (Behind names the partitions that
	// had not within the drain bound).
	Load, CaughtUp time.Duration
	Behind         string
	// Starts and Stops count the partitions started and stopped over all
	// instances (a move is one of each); Instances names them with the
	// readings each parsed.
	Starts, Stops int
	Instances     []string
	// Windows written (a partition's minute each), aggregates Written and
	// Kept (the stored one covered more), and the highest window write
	// p99 a status line showed.
	Windows, Written, Kept int64
	MaxWriteP99            time.Duration
	// Report is the verification of every home's every minute in Redis
	// against the recount of what was sent; DeadLetters what the
	// dead-letter topic holds and DeadLetterErr its check against what was
	// sent.
	Report        Report
	DeadLetters   DeadLetters
	DeadLetterErr error
	// Interrupted is set when the run was stopped before the end: nothing
	// was verified.
	Interrupted bool
}

// OK reports whether the run was verified: every minute stored as
// recounted and the dead letters as sent.
func (s DemoSummary) OK() bool {
	return !s.Interrupted && s.Behind == "" && s.Report.OK() && s.DeadLetterErr == nil
}

func (s DemoSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "summary: %d simulated minutes of %d homes (up to %d kinds of sensor): %d records sent in %v (%.0f/s)\n",
		s.Minutes, s.Homes, s.Kinds, s.Sent, s.Load.Round(time.Millisecond), float64(s.Sent)/max(s.Load.Seconds(), 1e-9))
	fmt.Fprintf(&b, "  sent: %d valid readings, %d malformed, %d late, %d out of range, %d heartbeats\n",
		s.Valid, s.Malformed, s.Late, s.OutOfRange, s.Heartbeats)
	fmt.Fprintf(&b, "  instances: %s; %d partition starts, %d stops\n", strings.Join(s.Instances, ", "), s.Starts, s.Stops)
	fmt.Fprintf(&b, "  windows written %d (aggregates written %d, kept %d); highest window write p99 %v\n",
		s.Windows, s.Written, s.Kept, s.MaxWriteP99.Round(time.Millisecond))
	if s.Interrupted {
		b.WriteString("  interrupted: not verified")
		return b.String()
	}
	if s.Behind != "" {
		fmt.Fprintf(&b, "  checkpoints NOT at the log end when the drain bound passed:%s\n", s.Behind)
	} else {
		fmt.Fprintf(&b, "  checkpoints at the log end %v after the load\n", s.CaughtUp.Round(time.Millisecond))
	}
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	fmt.Fprintf(&b, "  aggregates: %v: %s\n", s.Report, verdict(s.Report.OK()))
	reasons := make([]string, 0, len(s.DeadLetters.Reasons))
	for r, n := range s.DeadLetters.Reasons {
		reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
	}
	slices.Sort(reasons)
	written := fmt.Sprintf("%d written", s.DeadLetters.Records)
	if again := s.DeadLetters.Records - s.DeadLetters.Distinct(); again > 0 {
		written += fmt.Sprintf(", %d of them again by a partition's next owner replaying from its checkpoint", again)
	}
	fmt.Fprintf(&b, "  dead letters: %d malformed, %d late, %d other (%s; %s): ",
		s.DeadLetters.Malformed, s.DeadLetters.Late, s.DeadLetters.Other, written, strings.Join(reasons, ", "))
	if s.DeadLetterErr != nil {
		fmt.Fprintf(&b, "FAILED: %v\n", s.DeadLetterErr)
	} else {
		b.WriteString("as sent: ok\n")
	}
	if s.OK() {
		b.WriteString("verification passed")
	} else {
		b.WriteString("verification FAILED")
	}
	return b.String()
}

// demoInstance is one worker of the demo.
type demoInstance struct {
	id       string
	w        *Worker
	cancel   context.CancelFunc
	stopping bool
	final    *Stats // once it stopped
}

func (in *demoInstance) stats() Stats {
	if in.final != nil {
		return *in.final
	}
	return in.w.Stats()
}

type instanceEnd struct {
	in  *demoInstance
	err error
}

// demo is one run.
type demo struct {
	cfg      DemoConfig
	out      io.Writer
	brokers  []string
	rdb      redis.UniversalClient
	gen      *Generator
	simStart time.Time // the simulated time the load starts at
	start    time.Time

	instances []*demoInstance
	ended     chan instanceEnd
	dead      *deadLetterCount
	changes   sync.Mutex
	starts    int
	stops     int

	lastAt             time.Time
	lastSent, lastRead int64
	maxP99             time.Duration
}

// RunDemo runs the demo, writing its progress to out, and returns its
// summary. An error means the run could not be carried out (a worker
// failed, the embedded services did not start); a run carried out
// reports its verification in the summary (DemoSummary.OK).
func RunDemo(ctx context.Context, cfg DemoConfig, out io.Writer) (DemoSummary, error) {
	if err := cfg.Validate(); err != nil {
		return DemoSummary{}, err
	}
	cfg.defaults()
	out = &lockedWriter{w: out}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, DefaultTopic),
		kfake.SeedTopics(4, DefaultDeadLetterTopic))
	if err != nil {
		return DemoSummary{}, fmt.Errorf("starting the embedded broker: %w", err)
	}
	defer cluster.Close()
	mr, err := miniredis.Run()
	if err != nil {
		return DemoSummary{}, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 64})
	defer rdb.Close()
	span := time.Duration(cfg.simMinutes()) * time.Minute
	store, err := NewStore(rdb, DefaultNamespace, max(DefaultRetention, span+10*time.Minute))
	if err != nil {
		return DemoSummary{}, err
	}
	owners, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: DefaultNamespace, Stream: DefaultTopic,
		Group: DefaultGroup, Expiration: cfg.Expiration})
	if err != nil {
		return DemoSummary{}, err
	}
	gcfg := cfg.genConfig(time.Now())
	gen, err := NewGenerator(gcfg)
	if err != nil {
		return DemoSummary{}, err
	}
	d := &demo{cfg: cfg, out: out, brokers: cluster.ListenAddrs(), rdb: rdb, gen: gen, simStart: gcfg.Start,
		ended: make(chan instanceEnd, 16)}
	if d.dead, err = followDeadLetters(d.brokers, DefaultDeadLetterTopic); err != nil {
		return DemoSummary{}, err
	}
	defer d.dead.close()
	fmt.Fprintf(out, "embedded broker (kfake) on %s: %s with %d partitions; embedded Redis (miniredis) on %s\n",
		strings.Join(d.brokers, ","), DefaultTopic, cfg.Partitions, mr.Addr())
	partitions := make([]int32, cfg.Partitions)
	for i := range partitions {
		partitions[i] = int32(i)
	}
	if cfg.Listen != "" {
		stopPage, err := d.servePage(store, owners, partitions)
		if err != nil {
			return DemoSummary{}, err
		}
		defer stopPage()
	}
	defer d.stopAll()
	for range cfg.Instances {
		if err := d.startInstance(ctx); err != nil {
			return DemoSummary{}, err
		}
	}
	fmt.Fprintf(out, "%d instances (%s), ownership interval %v, lease %v; %d homes x %d kinds, compression %v, %d simulated minutes in %v",
		cfg.Instances, d.names(), cfg.Interval, cfg.Expiration, cfg.Homes, cfg.Kinds, cfg.Compression, cfg.simMinutes(),
		time.Duration(float64(span)/cfg.Compression).Round(time.Millisecond))
	if cfg.AddKindAfter > 0 && cfg.Kinds < NumKinds {
		fmt.Fprintf(out, ", a kind more after %v", cfg.AddKindAfter)
	}
	fmt.Fprintln(out)

	sum := DemoSummary{Homes: cfg.Homes, Kinds: cfg.Kinds, Minutes: cfg.simMinutes()}
	d.start = time.Now()
	if err := d.waitHeld(ctx); err != nil {
		return sum, err
	}
	if ctx.Err() != nil {
		return d.interrupted(sum), nil
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return sum, err
	}
	defer producer.Close()
	d.start, d.lastAt = time.Now(), time.Now()
	genCtx, stopGen := context.WithCancel(ctx)
	genDone := make(chan error, 1)
	go func() { genDone <- gen.Run(genCtx, producer, cfg.simMinutes()) }()
	loading := true
	defer func() {
		if loading { // a failure cut the load short: it ends before its producer closes
			stopGen()
			<-genDone
		}
		stopGen()
	}()
	var tick <-chan time.Time
	if cfg.Every > 0 {
		t := time.NewTicker(cfg.Every)
		defer t.Stop()
		tick = t.C
	}
	stopAt := time.After(cfg.Duration / 3)
	joinAt := time.After(2 * cfg.Duration / 3)
	var loadErr error
	for loading {
		select {
		case <-tick:
			fmt.Fprintln(out, d.line())
		case <-stopAt:
			in := d.instances[1]
			fmt.Fprintf(out, "%5.1fs stopping %s gracefully (holding %d partitions): final checkpoints, then its partitions are let go\n",
				d.elapsed(), in.id, len(in.w.Owned()))
			in.stopping = true
			in.cancel()
		case <-joinAt:
			if err := d.startInstance(ctx); err != nil {
				return sum, err
			}
			in := d.instances[len(d.instances)-1]
			fmt.Fprintf(out, "%5.1fs %s joins\n", d.elapsed(), in.id)
		case e := <-d.ended:
			if err := d.onEnd(e); err != nil {
				return sum, err
			}
		case loadErr = <-genDone:
			loading = false
		}
	}
	sum.Load = time.Since(d.start)
	if loadErr != nil {
		return sum, loadErr
	}
	if ctx.Err() != nil {
		return d.interrupted(sum), nil
	}
	fmt.Fprintf(out, "%5.1fs load sent: %d records; waiting for every checkpoint to reach its log's end (at most %v)\n",
		d.elapsed(), gen.Sent(), cfg.Drain)
	loaded := time.Now()
	behind, err := d.drain(ctx, owners, tick)
	if err != nil {
		return sum, err
	}
	if ctx.Err() != nil {
		return d.interrupted(sum), nil
	}
	sum.CaughtUp, sum.Behind = time.Since(loaded), behind
	if err := d.stopAll(); err != nil {
		return sum, err
	}
	d.summarize(&sum)
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if sum.Report, err = gen.Expected.Verify(vctx, store); err != nil {
		return sum, fmt.Errorf("reading the aggregates back: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...))
	if err != nil {
		return sum, err
	}
	defer cl.Close()
	if sum.DeadLetters, err = ReadDeadLetters(vctx, cl, DefaultDeadLetterTopic); err != nil {
		return sum, fmt.Errorf("reading the dead letters: %w", err)
	}
	sum.DeadLetterErr = gen.Expected.CheckDeadLetters(sum.DeadLetters)
	return sum, nil
}

func (d *demo) elapsed() float64 { return time.Since(d.start).Seconds() }

func (d *demo) names() string {
	var ns []string
	for _, in := range d.instances {
		ns = append(ns, in.id)
	}
	return strings.Join(ns, ", ")
}

// startInstance starts the next worker.
func (d *demo) startInstance(ctx context.Context) error {
	id := fmt.Sprintf("w%d", len(d.instances)+1)
	// An instance stops when the demo tells it (gracefully), not at once
	// with the caller's context.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := New(wctx, Config{Conn: kafka.Conn{Brokers: d.brokers}, Redis: d.rdb, InstanceID: id,
		Interval: d.cfg.Interval, Expiration: d.cfg.Expiration, IdleClose: d.cfg.IdleClose, Logger: d.cfg.Logger,
		Retention: max(DefaultRetention, time.Duration(d.cfg.simMinutes())*time.Minute+10*time.Minute),
		OnChange: func(c ownership.Change) {
			d.changes.Lock()
			if c.Started {
				d.starts++
			} else {
				d.stops++
			}
			d.changes.Unlock()
		}})
	if err != nil {
		cancel()
		return fmt.Errorf("starting %s: %w", id, err)
	}
	in := &demoInstance{id: id, w: w, cancel: cancel}
	d.instances = append(d.instances, in)
	go func() { d.ended <- instanceEnd{in, w.Run(wctx)} }()
	return nil
}

// heldLimit bounds the wait for the instances to take every partition
// before the load starts.
const heldLimit = 30 * time.Second

// waitHeld waits until the instances hold every partition of the readings
// topic between them, and says how long it took: a load sent before
// would pile up unread, and the first status lines would show the
// instances still claiming rather than the pipeline at work.
func (d *demo) waitHeld(ctx context.Context) error {
	limit := time.After(heldLimit)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		held := map[int32]bool{}
		for _, in := range d.instances {
			for _, p := range in.w.Owned() {
				held[p] = true
			}
		}
		if len(held) == int(d.cfg.Partitions) {
			fmt.Fprintf(d.out, "the instances took all %d partitions in %v; sending the load (its clock starts now)\n",
				d.cfg.Partitions, time.Since(d.start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-poll.C:
		case e := <-d.ended:
			if err := d.onEnd(e); err != nil {
				return err
			}
		case <-limit:
			return fmt.Errorf("the instances did not take every partition within %v: %d of %d held", heldLimit, len(held), d.cfg.Partitions)
		case <-ctx.Done():
			return nil
		}
	}
}

// onEnd records an instance's end: one that was told to stop, or one that
// failed, which ends the run.
func (d *demo) onEnd(e instanceEnd) error {
	st := e.in.w.Stats()
	e.in.final = &st
	switch {
	case !e.in.stopping && e.err != nil:
		return fmt.Errorf("instance %s: %w", e.in.id, e.err)
	case !e.in.stopping:
		return fmt.Errorf("instance %s stopped by itself", e.in.id)
	case e.err != nil:
		// Nothing is lost: what it had not settled is read again by the
		// partitions' next owners, from its last checkpoints.
		fmt.Fprintf(d.out, "%5.1fs %s stopped: %v; its unsettled readings are read again by the next owners\n", d.elapsed(), e.in.id, e.err)
	default:
		fmt.Fprintf(d.out, "%5.1fs %s stopped: its final checkpoints written, its partitions free for the others\n", d.elapsed(), e.in.id)
	}
	return nil
}

// stopAll stops the instances still running and waits for them; once.
func (d *demo) stopAll() error {
	var errs []error
	waiting := 0
	for _, in := range d.instances {
		if in.final == nil {
			if !in.stopping {
				in.stopping = true
				in.cancel()
			}
			waiting++
		}
	}
	limit := time.After(30 * time.Second)
	for waiting > 0 {
		select {
		case e := <-d.ended:
			waiting--
			st := e.in.w.Stats()
			e.in.final = &st
			if e.err != nil {
				errs = append(errs, fmt.Errorf("instance %s: %w", e.in.id, e.err))
			}
		case <-limit:
			return errors.Join(append(errs, fmt.Errorf("%d instances did not stop within 30 s", waiting))...)
		}
	}
	return errors.Join(errs...)
}

// drain prints the status line until every partition's checkpoint is at
// the end of its log, or the drain bound passes; it returns the
// partitions still behind then.
func (d *demo) drain(ctx context.Context, owners *redisstore.Store, tick <-chan time.Time) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.After(d.cfg.Drain)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	var behind string
	for {
		select {
		case <-tick:
			fmt.Fprintln(d.out, d.line())
		case e := <-d.ended:
			if err := d.onEnd(e); err != nil {
				return "", err
			}
		case <-deadline:
			return behind, nil
		case <-ctx.Done():
			return "", nil
		case <-poll.C:
			b, err := checkpointsBehind(ctx, adm, owners)
			if err == nil {
				if b == "" {
					return "", nil
				}
				behind = b
			}
		}
	}
}

// checkpointsBehind names the partitions of the readings topic whose
// checkpoint is short of the log's end, with both.
func checkpointsBehind(ctx context.Context, adm *kadm.Client, owners *redisstore.Store) (string, error) {
	ends, err := adm.ListEndOffsets(ctx, DefaultTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return "", err
	}
	end := map[int32]int64{}
	var ps []int32
	ends.Each(func(o kadm.ListedOffset) {
		end[o.Partition] = o.Offset
		ps = append(ps, o.Partition)
	})
	slices.Sort(ps)
	cks, err := owners.Checkpoints(ctx, ps)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ck := range cks {
		if e := end[ck.Partition]; ck.Offset < e {
			fmt.Fprintf(&b, " p%d:%d/%d", ck.Partition, max(ck.Offset, 0), e)
		}
	}
	return b.String(), nil
}

// summarize adds the counts of the run to sum.
func (d *demo) summarize(sum *DemoSummary) {
	sum.Sent, sum.Kinds = d.gen.Sent(), d.gen.Kinds()
	sum.Valid, sum.Malformed, sum.Late, sum.OutOfRange, sum.Heartbeats = d.gen.Expected.Counts()
	for _, in := range d.instances {
		st := in.stats()
		sum.Instances = append(sum.Instances, fmt.Sprintf("%s read %d", in.id, st.Parsed))
		sum.Windows += st.Windows
		sum.Written += st.Written
		sum.Kept += st.Kept
		sum.MaxWriteP99 = max(sum.MaxWriteP99, st.WriteP99)
	}
	sum.MaxWriteP99 = max(sum.MaxWriteP99, d.maxP99)
	d.changes.Lock()
	sum.Starts, sum.Stops = d.starts, d.stops
	d.changes.Unlock()
}

// interrupted stops the instances and returns the summary of a run cut
// short.
func (d *demo) interrupted(sum DemoSummary) DemoSummary {
	fmt.Fprintf(d.out, "%5.1fs interrupted: stopping the instances\n", d.elapsed())
	_ = d.stopAll()
	d.summarize(&sum)
	sum.Interrupted = true
	sum.Minutes = int(d.gen.SimNow().Sub(d.simStart) / time.Minute) // whole minutes sent
	return sum
}

// servePage serves the residents' page on cfg.Listen and prints its
// address; the returned func stops it.
func (d *demo) servePage(store *Store, owners *redisstore.Store, partitions []int32) (func(), error) {
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("serving the page on %s: %w", d.cfg.Listen, err)
	}
	srv := &http.Server{Handler: PageMux(store, owners, partitions), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(d.out, "residents' page: http://%s/homes\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// PageMux serves the residents' page (NewPage) under /homes, with / sent
// there.
func PageMux(store *Store, owners *redisstore.Store, partitions []int32) *http.ServeMux {
	page := NewPage(store, owners, partitions)
	mux := http.NewServeMux()
	mux.Handle("/homes", page)
	mux.Handle("/homes/", page)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/homes", http.StatusFound)
	})
	return mux
}

// lockedWriter serializes writes: the status line and the notes come
// from one goroutine, the caller may share the writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
