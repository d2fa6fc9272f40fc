package dashboards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// liveLimit bounds how long the live pipelines run while their /metrics
// is scraped for the names the dashboard and the rules use.
const liveLimit = 60 * time.Second

// scraped is the union of the metric families seen on the /metrics of
// running pipelines, by name.
type scraped struct {
	client http.Client
	seen   Catalog
}

func (s *scraped) scrape(url string) error {
	resp, err := s.client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	for name, f := range fams {
		s.seen[name] = Kind(strings.ToLower(f.GetType().String()))
	}
	return nil
}

// covers reports whether every name of want has been seen.
func (s *scraped) covers(want []string) bool {
	return len(s.seen.Missing(want)) == 0
}

// scrapeLive runs, in this process, the delivery system of `sluice demo`
// (scheduler and supervisor: Kafka sources, priority, asynchronous steps
// with breakers, adaptive limits and lanes, parking and replay, dead
// letters, checkpoints) and a pipeline reading through the Redis ownership
// balancer, and scrapes their /metrics until every name of want has shown
// up or they end. It returns every family seen.
func scrapeLive(t *testing.T, want []string) Catalog {
	t.Helper()
	s := &scraped{client: http.Client{Timeout: 5 * time.Second}, seen: Catalog{}}
	ctx, cancel := context.WithTimeout(context.Background(), liveLimit)
	defer cancel()
	urls := make(chan string, 2)
	var wg sync.WaitGroup
	var errs [2]error
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = runDemo(ctx, urls) }()
	go func() { defer wg.Done(); errs[1] = runOwned(ctx, urls) }()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()

	var targets []string
	served, last := map[string]bool{}, map[string]error{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case u := <-urls:
			targets = append(targets, u)
			continue
		case <-ended:
			done = true
		case <-tick.C:
		}
		for _, u := range targets {
			// A pipeline that ended serves no more: its last scrape
			// counts.
			if err := s.scrape(u); err == nil {
				served[u] = true
			} else {
				last[u] = err
			}
		}
		if len(targets) == 2 && s.covers(want) {
			break
		}
	}
	cancel()
	<-ended
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("live pipeline: %v", err)
		}
	}
	if len(served) < 2 {
		t.Fatalf("only %d of the 2 live pipelines served /metrics: %v", len(served), last)
	}
	return s.seen
}

// runDemo runs the demo with faults at every service (retries, parkings,
// compensations, dead letters) and sends its /metrics URL on urls.
func runDemo(ctx context.Context, urls chan<- string) error {
	cfg := demo.Defaults(20 * time.Second)
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery = 300, 0, 0
	cfg.Sim.TransientRate, cfg.Sim.ThrottleRate, cfg.Sim.PermanentRate = 0.1, 0.05, 0.01
	cfg.Partitions, cfg.Every, cfg.Drain = 4, -1, 5*time.Second
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	_, err := demo.Run(ctx, cfg, &announced{urls: urls})
	return err
}

// announced passes on the metrics URL the demo prints.
type announced struct {
	urls chan<- string
	sent atomic.Bool
}

var metricsURL = regexp.MustCompile(`metrics: (http://\S+/metrics)`)

func (a *announced) Write(p []byte) (int, error) {
	if m := metricsURL.FindSubmatch(p); m != nil && !a.sent.Swap(true) {
		a.urls <- string(m[1])
	}
	return len(p), nil
}

// runOwned runs a pipeline over a topic whose partitions it owns through
// leases in Redis (the ownership balancer, checkpointing there), with an
// asynchronous step that fails now and then (retries, a retry budget, a
// breaker), and sends its /metrics URL on urls.
func runOwned(ctx context.Context, urls chan<- string) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "readings"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	conn := kafka.Conn{Brokers: cluster.ListenAddrs()}
	if err := produce(ctx, conn, "readings", 400); err != nil {
		return err
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return err
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	log := slog.New(slog.DiscardHandler)
	src, err := kafka.NewAssigned(ctx, kafka.AssignedConfig{Conn: conn, Topic: "readings", Logger: log})
	if err != nil {
		return err
	}
	defer src.Close()
	store, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "dashboards", Stream: "readings", Group: "readers",
		Expiration: 3 * time.Second})
	if err != nil {
		return err
	}
	bal, err := ownership.NewBalancer[[]byte](store, src, ownership.Config{ID: "instance-1", Interval: 500 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	budget, err := backpressure.NewRetryBudget(0.2, 10)
	if err != nil {
		return err
	}
	br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "store"})
	if err != nil {
		return err
	}
	policy := flow.Background()
	policy.BaseDelay, policy.MaxDelay = time.Millisecond, 5*time.Millisecond
	var calls atomic.Int64
	step := flow.MapAsync(4, func(_ context.Context, v []byte) ([]byte, error) {
		if calls.Add(1)%5 == 0 {
			return nil, stream.Transient(errors.New("store busy"))
		}
		return v, nil
	}, flow.Retry(policy),
		flow.Budget(budget), flow.Breaker(br))

	g := stream.New(stream.WithPipeline("owned"), stream.WithLogger(log))
	read := stream.From(g, stream.Source[[]byte](bal), stream.Name("readings"))
	stored := stream.Via(read, step, stream.Name("store"))
	stream.To(stored, checkpoint.New[[]byte](bal), stream.Name("checkpoint"))
	stream.To(g.Failures(), sink.Discard[stream.Failure](), stream.Name("failures"))

	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "owned")
	if err != nil {
		return err
	}
	if err := m.Register(g); err != nil {
		return err
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	addr, served, err := observe.Serve(srvCtx, observe.ServerConfig{Addr: "127.0.0.1:0", Gatherer: reg, Graphs: []*stream.Graph{g}})
	if err != nil {
		stopSrv()
		return err
	}
	defer func() { stopSrv(); <-served }()
	urls <- "http://" + addr + "/metrics"
	err = g.Run(ctx)
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	return errors.Join(err, bal.Close(cctx))
}

func produce(ctx context.Context, conn kafka.Conn, topic string, n int) error {
	cl, err := kgo.NewClient(conn.ClientOpts()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%16), Value: fmt.Appendf(nil, "%d", i)}
	}
	return cl.ProduceSync(ctx, rs...).FirstErr()
}
