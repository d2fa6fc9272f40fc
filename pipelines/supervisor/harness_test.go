package supervisor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// The consumer groups of the end-to-end tests.
const (
	groupFailures = "supervisor"
	groupReplay   = "supervisor-replay"
)

// bookedServices books a package, a drone and a delivery for each id in
// simulated services, serves them over HTTP on loopback behind a refuser
// with status, and returns the ledger and HTTP clients of the services.
func bookedServices(t *testing.T, ids []string, status func(path string, seen int) int) (*delivery.Ledger, delivery.Backends) {
	t.Helper()
	ctx := context.Background()
	l := delivery.NewLedger()
	sim := delivery.Simulated(delivery.SimConfig{}, l, nil)
	for _, id := range ids {
		r := delivery.Request{ID: id, Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
		if err := sim.Packages.Put(ctx, id, r); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.Drones.Schedule(ctx, id, r.Pickup); err != nil {
			t.Fatal(err)
		}
		if err := sim.Deliveries.Put(ctx, id, delivery.Progress{Request: r}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(newRefuser(delivery.HTTPHandler(sim), status))
	client := delivery.NewHTTPClient(32)
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
	})
	return l, delivery.HTTPBackends(srv.URL, client)
}

// settings are what a test changes in the supervisor's Config.
type settings struct {
	attempts       int
	maxParkings    int
	replayAfter    time.Duration // default 20 ms
	maxReplayDelay time.Duration // default 80 ms
	drain          time.Duration // default the supervisor's
	metrics        *observe.Metrics
	notifier       supervisor.Notifier
	producerOpts   []kgo.Opt // of the parking's and dead letters' client
	tracer         trace.TracerProvider
}

// runSupervisor runs the supervisor against brokers and backends until the
// returned stop is called (or the test ends), which returns Run's error.
func runSupervisor(t *testing.T, brokers []string, b delivery.Backends, s settings) (stop func() error) {
	t.Helper()
	_, stop = startSupervisor(t, brokers, b, s)
	return stop
}

// startSupervisor is runSupervisor returning the graph too.
func startSupervisor(t *testing.T, brokers []string, b delivery.Backends, s settings) (g *stream.Graph, stop func() error) {
	t.Helper()
	ctx := context.Background()
	src, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: groupFailures,
		Topics: []string{topicFailures}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: groupReplay,
		Topics: []string{topicRetry}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	producer := kafkaClient(t, brokers, s.producerOpts...)
	if s.notifier == nil {
		s.notifier = supervisor.NewNotifications()
	}
	if s.maxReplayDelay == 0 {
		s.maxReplayDelay = 80 * time.Millisecond
	}
	if s.replayAfter == 0 {
		s.replayAfter = 20 * time.Millisecond
	}
	g, err = supervisor.New(supervisor.Config{Source: src, Committer: src, Backends: b,
		Notifier: s.notifier, Retry: quickRetry(s.attempts), Metrics: s.metrics, Logger: quiet,
		Producer: producer, RetryTopic: topicRetry, DeadLetterTopic: topicDead,
		Replay: replay, ReplayCommitter: replay, ReplayAfter: s.replayAfter,
		MaxReplayDelay: s.maxReplayDelay, MaxParkings: s.maxParkings, DrainTimeout: s.drain, TracerProvider: s.tracer})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
			src.Close(ctx)
			replay.Close(ctx)
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return g, stop
}

// waitFor polls cond until it holds, failing the test with what says why
// not when a minute has passed.
func waitFor(t *testing.T, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after a minute: %s", why())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flakyNotifier fails the first failures notifications of each id in ids
// with a 503, then records them.
type flakyNotifier struct {
	*supervisor.Notifications
	ids      map[string]bool
	failures int

	mu    sync.Mutex
	calls map[string]int
}

func (n *flakyNotifier) Notify(ctx context.Context, ev delivery.Compensation) error {
	id := ev.Progress.Request.ID
	n.mu.Lock()
	n.calls[id]++
	fail := n.ids[id] && n.calls[id] <= n.failures
	n.mu.Unlock()
	if fail {
		return &flow.HTTPError{Method: "POST", URL: "/notifications/" + id, Status: http.StatusServiceUnavailable}
	}
	return n.Notifications.Notify(ctx, ev)
}

// metricValue returns the value of the series of name with labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range s.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return s.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}
