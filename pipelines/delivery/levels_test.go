package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// levelTopics are the tests' topics of the levels, highest first.
var levelTopics = [delivery.Levels]string{"requests-high", "requests-normal", "requests-low"}

// levelsBroker starts a broker with a topic per level (partitions each),
// failures and dead letters.
func levelsBroker(t *testing.T, partitions int32) []string {
	return testenv.KfakeWith(t, kfake.SeedTopics(partitions, levelTopics[:]...),
		kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
}

// orderedDeliveries notes the order in which requests complete: the
// deliveries service's Put is the last step.
type orderedDeliveries struct {
	delivery.Deliveries
	mu    sync.Mutex
	order []string
}

func (d *orderedDeliveries) Put(ctx context.Context, id string, p delivery.Progress) error {
	err := d.Deliveries.Put(ctx, id, p)
	if err == nil {
		d.mu.Lock()
		d.order = append(d.order, id)
		d.mu.Unlock()
	}
	return err
}

// runLevels runs a scheduler reading the level topics, produces recs once
// every level's source has its partitions (so that no level starts ahead
// of another for want of an assignment), waits until they are all
// committed, and stops it.
func runLevels(t *testing.T, brokers []string, producer *kgo.Client, cfg delivery.SchedulerConfig, recs []*kgo.Record) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	var srcs [delivery.Levels]*kafka.Source
	for l, topic := range levelTopics {
		src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers},
			Group: "levels-" + delivery.LevelNames[l], Topics: []string{topic}, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		srcs[l] = src
		cfg.Levels = append(cfg.Levels, source.Level[[]byte]{Source: src})
	}
	cfg.Committer = stream.CommitterFunc(func(ctx context.Context) error {
		var errs []error
		for _, s := range srcs {
			if err := s.Commit(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	cfg.Producer, cfg.FailuresTopic, cfg.DeadLetterTopic, cfg.Logger = producer, "failures", "dead", logger
	sch, err := delivery.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sch.Graph.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		assigned := 0
		for _, s := range srcs {
			if s.Stats().Assigned > 0 {
				assigned++
			}
		}
		if assigned == len(srcs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d level sources have partitions after 30 s", assigned, len(srcs))
		}
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, sch, done, 60*time.Second, int64(len(recs)), func() (committed int64) {
		for _, s := range srcs {
			for _, p := range s.Stats().Partitions {
				committed += max(0, p.Committed)
			}
		}
		return committed
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// levelRecord is a valid request for topic, of owner, with priority prio
// (nil: none).
func levelRecord(topic, id, owner string, prio *int) *kgo.Record {
	r := delivery.Request{ID: id, Owner: owner, Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1, Deadline: time.Now().Add(time.Hour),
		Priority: prio}
	b, _ := json.Marshal(r)
	return &kgo.Record{Topic: topic, Key: []byte(id), Value: b}
}

// The scheduler reads a topic per level; once check_account said the
// owner's tier, each request is served (and counted) at its own priority's
// level, or without one at its tier's, whatever topic it came on. A
// record of an earlier version without the field is served by its tier;
// one with a priority out of range is dead-lettered with its reason,
// never served as high.
func TestSchedulerLevelFromRequestOrTier(t *testing.T) {
	brokers := levelsBroker(t, 1)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	hi, no, lo := levelTopics[0], levelTopics[1], levelTopics[2]
	old := levelRecord(no, "d-old", "acct-7", nil) // no priority field at all, as earlier versions' free-tier records
	bad := levelRecord(hi, "d-bad", "vip-8", nil)
	bad.Value = []byte(strings.TrimSuffix(string(bad.Value), "}") + `,"priority":7}`)
	recs := []*kgo.Record{
		levelRecord(hi, "d-1", "vip-1", nil),              // paying: high
		levelRecord(lo, "d-2", "vip-2", nil),              // paying on the low topic: high once the tier is known
		levelRecord(hi, "d-3", "acct-3", nil),             // free on the high topic: low
		levelRecord(no, "d-4", "vip-4", delivery.Prio(1)), // own priority wins over the tier
		levelRecord(hi, "d-5", "vip-5", delivery.Prio(2)),
		levelRecord(lo, "d-6", "acct-6", delivery.Prio(0)),
		old, // free, no field: low
		bad, // dead-lettered
	}
	if strings.Contains(string(old.Value), "priority") {
		t.Fatalf("the old record has a priority: %s", old.Value)
	}
	stats := delivery.NewLevelStats(false)
	ledger := delivery.NewLedger()
	runLevels(t, brokers, producer, delivery.SchedulerConfig{Parallelism: 8, LevelStats: stats,
		Backends: delivery.Simulated(delivery.SimConfig{PayingPrefix: "vip-"}, ledger, nil)}, recs)
	if got, want := stats.Completed(), [delivery.Levels]int64{3, 1, 3}; got != want {
		t.Fatalf("completed by level %v, want %v", got, want)
	}
	dead := readTopic(t, brokers, "dead", 1)
	if len(dead) != 1 || string(dead[0].Key) != "d-bad" {
		t.Fatalf("%d dead letters, want d-bad's", len(dead))
	}
	reason := string(header(dead[0], kafkasink.HeaderReason))
	if !strings.Contains(reason, "priority 7") || !strings.Contains(reason, "priority out of range") {
		t.Fatalf("dead letter reason %q, want one naming priority 7 out of range", reason)
	}
}

// Under overload — a backlog on every level's topic, several times what
// the scheduler holds in memory, taken at its own pace — high requests
// finish sooner than low ones: the priority source reads the levels 6:3:1
// and every step serves by level. Nothing is lost or done twice. The
// assertions are on the order of completion (mean rank by level) and on
// counts, not on times; the p99 latencies by level follow from the order,
// as every record was written at once, when every level's source had its
// partitions.
//
// What the pipes hold is in the order it was read, whatever the levels:
// with the default Buffer (16 here, for 4 calls in flight) that is about a
// hundred requests over the eight pipes, not the four thousand pipes of
// 512 held, which made normal (or low) finish before high whenever its
// topic was fetched first.
func TestSchedulerServesHighFirstUnderOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("overloads the scheduler for seconds: make test runs it, -short does not")
	}
	const perLevel = 2000
	brokers := levelsBroker(t, 2)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	levelOf := map[string]int{}
	var recs []*kgo.Record
	for i := range perLevel {
		for l, topic := range levelTopics {
			id := fmt.Sprintf("d-%s-%04d", delivery.LevelNames[l], i)
			levelOf[id] = l
			// Half carry their level, half leave it to their owner's tier
			// (normal has no tier: it always carries it).
			owner, prio := "acct-1", delivery.Prio(l)
			if i%2 == 0 && l != delivery.Normal {
				owner, prio = "acct-2", nil
				if l == delivery.High {
					owner = "vip-2"
				}
			}
			recs = append(recs, levelRecord(topic, id, owner, prio))
		}
	}
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond, PayingPrefix: "vip-"},
		ledger, nil)
	od := &orderedDeliveries{Deliveries: backends.Deliveries}
	backends.Deliveries = od
	stats := delivery.NewLevelStats(true)
	runLevels(t, brokers, producer, delivery.SchedulerConfig{Parallelism: 4, LevelStats: stats, Backends: backends}, recs)

	if got := stats.Completed(); got != [delivery.Levels]int64{perLevel, perLevel, perLevel} {
		t.Fatalf("completed by level %v, want %d each", got, perLevel)
	}
	if n := ledger.LiveCount("deliveries"); n != len(recs) || ledger.Twice() != 0 || len(od.order) != len(recs) {
		t.Fatalf("%d deliveries live, %d completions, %d side effects twice; want %d, %d, 0",
			n, len(od.order), ledger.Twice(), len(recs), len(recs))
	}
	var rankSum [delivery.Levels]int
	for rank, id := range od.order {
		rankSum[levelOf[id]] += rank
	}
	var mean [delivery.Levels]float64
	for l := range mean {
		mean[l] = float64(rankSum[l]) / perLevel
	}
	t.Logf("mean completion rank by level %.0f (of %d); p99 by level %v %v %v", mean, len(recs),
		stats.Quantiles(0, 0.99)[0], stats.Quantiles(1, 0.99)[0], stats.Quantiles(2, 0.99)[0])
	if !(mean[delivery.High] < mean[delivery.Normal] && mean[delivery.Normal] < mean[delivery.Low]) {
		t.Fatalf("mean completion rank by level %.0f: want high first, then normal, then low", mean)
	}
	if hi, lo := stats.Quantiles(delivery.High, 0.99)[0], stats.Quantiles(delivery.Low, 0.99)[0]; hi >= lo {
		t.Fatalf("high p99 %v, low p99 %v: want high's lower", hi, lo)
	}
}
