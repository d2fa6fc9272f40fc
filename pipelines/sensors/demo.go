package sensors

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

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
	liveMu    sync.Mutex
	live      []*stream.Graph // the running instances' pipelines, for /status
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
	env, err := startDemoEnv(cfg)
	if err != nil {
		return DemoSummary{}, err
	}
	defer env.close()
	d, err := newDemo(cfg, out, env)
	if err != nil {
		return DemoSummary{}, err
	}
	defer d.dead.close()
	if cfg.Listen != "" {
		stopPage, err := d.servePage(env.store, env.owners, partitionsOf(cfg.Partitions))
		if err != nil {
			return DemoSummary{}, err
		}
		defer stopPage()
	}
	defer d.stopAll()
	if err := d.startInstances(ctx); err != nil {
		return DemoSummary{}, err
	}

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
	tick, stopTick := statusTicker(cfg.Every)
	defer stopTick()
	if err := d.load(ctx, &sum, producer, tick); err != nil {
		return sum, err
	}
	if ctx.Err() != nil {
		return d.interrupted(sum), nil
	}
	fmt.Fprintf(out, "%5.1fs load sent: %d records; waiting for every checkpoint to reach its log's end (at most %v)\n",
		d.elapsed(), d.gen.Sent(), cfg.Drain)
	loaded := time.Now()
	behind, err := d.drain(ctx, env.owners, tick)
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
	err = d.verify(ctx, env.store, &sum)
	return sum, err
}

// newDemo prepares a run on env, its load generator and its count of the
// dead letters, and says where the embedded services listen.
func newDemo(cfg DemoConfig, out io.Writer, env *demoEnv) (*demo, error) {
	gcfg := cfg.genConfig(time.Now())
	gen, err := NewGenerator(gcfg)
	if err != nil {
		return nil, err
	}
	d := &demo{cfg: cfg, out: out, brokers: env.cluster.ListenAddrs(), rdb: env.rdb, gen: gen, simStart: gcfg.Start,
		ended: make(chan instanceEnd, 16)}
	if d.dead, err = followDeadLetters(d.brokers, DefaultDeadLetterTopic); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "embedded broker (kfake) on %s: %s with %d partitions; embedded Redis (miniredis) on %s\n",
		strings.Join(d.brokers, ","), DefaultTopic, cfg.Partitions, env.mr.Addr())
	return d, nil
}

// startInstances starts the configured number of instances and says how
// the run is shaped.
func (d *demo) startInstances(ctx context.Context) error {
	cfg := d.cfg
	for range cfg.Instances {
		if err := d.startInstance(ctx); err != nil {
			return err
		}
	}
	span := time.Duration(cfg.simMinutes()) * time.Minute
	fmt.Fprintf(d.out, "%d instances (%s), ownership interval %v, lease %v; %d homes x %d kinds, compression %v, %d simulated minutes in %v",
		cfg.Instances, d.names(), cfg.Interval, cfg.Expiration, cfg.Homes, cfg.Kinds, cfg.Compression, cfg.simMinutes(),
		time.Duration(float64(span)/cfg.Compression).Round(time.Millisecond))
	if cfg.AddKindAfter > 0 && cfg.Kinds < NumKinds {
		fmt.Fprintf(d.out, ", a kind more after %v", cfg.AddKindAfter)
	}
	fmt.Fprintln(d.out)
	return nil
}

// statusTicker ticks every every, never if every is 0; stop stops it.
func statusTicker(every time.Duration) (tick <-chan time.Time, stop func()) {
	if every <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}

// load sends the load through producer to its end, printing the status
// line at each tick, while one instance stops gracefully (after a third
// of the duration) and a new one joins (after two thirds). It sets
// sum.Load.
func (d *demo) load(ctx context.Context, sum *DemoSummary, producer *kgo.Client, tick <-chan time.Time) error {
	d.start, d.lastAt = time.Now(), time.Now()
	genCtx, stopGen := context.WithCancel(ctx)
	genDone := make(chan error, 1)
	go func() { genDone <- d.gen.Run(genCtx, producer, d.cfg.simMinutes()) }()
	loading := true
	defer func() {
		if loading { // a failure cut the load short: it ends before its producer closes
			stopGen()
			<-genDone
		}
		stopGen()
	}()
	stopAt := time.After(d.cfg.Duration / 3)
	joinAt := time.After(2 * d.cfg.Duration / 3)
	var loadErr error
	for loading {
		select {
		case <-tick:
			fmt.Fprintln(d.out, d.line())
		case <-stopAt:
			in := d.instances[1]
			fmt.Fprintf(d.out, "%5.1fs stopping %s gracefully (holding %d partitions): final checkpoints, then its partitions are let go\n",
				d.elapsed(), in.id, len(in.w.Owned()))
			in.stopping = true
			in.cancel()
		case <-joinAt:
			if err := d.startInstance(ctx); err != nil {
				return err
			}
			in := d.instances[len(d.instances)-1]
			fmt.Fprintf(d.out, "%5.1fs %s joins\n", d.elapsed(), in.id)
		case e := <-d.ended:
			if err := d.onEnd(e); err != nil {
				return err
			}
		case loadErr = <-genDone:
			loading = false
		}
	}
	sum.Load = time.Since(d.start)
	return loadErr
}

// verify reads the aggregates and the dead letters back into sum and
// checks them against what the generator sent.
func (d *demo) verify(ctx context.Context, store *Store, sum *DemoSummary) error {
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var err error
	if sum.Report, err = d.gen.Expected.Verify(vctx, store); err != nil {
		return fmt.Errorf("reading the aggregates back: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if sum.DeadLetters, err = ReadDeadLetters(vctx, cl, DefaultDeadLetterTopic); err != nil {
		return fmt.Errorf("reading the dead letters: %w", err)
	}
	sum.DeadLetterErr = d.gen.Expected.CheckDeadLetters(sum.DeadLetters)
	return nil
}

func (d *demo) elapsed() float64 { return time.Since(d.start).Seconds() }

func (d *demo) names() string {
	var ns []string
	for _, in := range d.instances {
		ns = append(ns, in.id)
	}
	return strings.Join(ns, ", ")
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
