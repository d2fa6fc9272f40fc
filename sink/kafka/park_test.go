package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/faultserver"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// TestParkAndReplay: a service is down for a while; messages that outlast
// their retries are parked on a Kafka topic, settled in the source, and
// replayed by a second pipeline once due; messages the service rejects go
// to the failure topic. Nothing is lost.
func TestParkAndReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for parked records to be replayed: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(4, "in"), kfake.SeedTopics(2, "retry"), kfake.SeedTopics(1, "failed"))
	const n = 2000
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	srv, err := faultserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.SetRetryAfter(0)
	srv.DownFor(faultserver.Unavailable, 700*time.Millisecond)

	var mu sync.Mutex
	done := map[string]string{} // id -> which pipeline completed it
	httpc := &http.Client{Timeout: 5 * time.Second}
	call := func(which string) func(context.Context, []byte) ([]byte, error) {
		return func(ctx context.Context, v []byte) ([]byte, error) {
			id, _ := strconv.Atoi(string(v))
			if id%50 == 0 {
				return nil, &flow.HTTPError{Status: 400, Body: "invalid delivery"}
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/deliveries/"+string(v), nil)
			resp, err := httpc.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			if err := flow.CheckResponse(resp); err != nil {
				return nil, err
			}
			mu.Lock()
			done[string(v)] = which
			mu.Unlock()
			return v, nil
		}
	}
	policy := flow.RetryPolicy{Strategy: flow.Exponential, Jitter: flow.FullJitter, MaxAttempts: 3,
		BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
	producer := client(t, brokers)
	quiet := slog.New(slog.DiscardHandler)

	// run builds src -> [Delay] -> MapAsync(call, Retry) -> checkpoint with
	// failures split into parking and the failure queue, and runs it until
	// stop says so.
	run := func(which, topic string, delay bool, stop func() bool) (parked, failed int64) {
		src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers},
			Group: which, Topics: []string{topic}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		g := stream.New(stream.WithLogger(quiet))
		s := stream.From(g, src)
		if delay {
			s = stream.Via(s, flow.Delay[[]byte](kafkasink.ReplayAt))
		}
		s = stream.Via(s, flow.MapAsync(32, call(which), flow.Retry(policy)))
		stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond)))
		transient, permanent := stream.Split(g.Failures(), func(f stream.Failure) bool { return f.Transient })
		park := kafkasink.NewParking(producer, "retry", 300*time.Millisecond)
		dead := kafkasink.NewDeadLetter(producer, "failed")
		stream.To(transient, park)
		stream.To(permanent, dead)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() {
			for !stop() && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
		}()
		if err := g.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if err := src.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return park.Stats().Produced, dead.Stats().Produced
	}
	count := func(which string) int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, w := range done {
			if w == which {
				k++
			}
		}
		return k
	}
	parkedA, failedA := runUntilSettled(t, run, count, n)
	if parkedA == 0 {
		t.Fatal("nothing was parked although the service was down: the test proves too little")
	}
	// The replay pipeline: parked messages come back once due and succeed.
	_, failedB := run("replay", "retry", true, func() bool { return int64(count("replay")) >= parkedA })

	completedMain, replayed := count("main"), count("replay")
	mu.Lock()
	lost := 0
	for i := range n {
		if _, ok := done[strconv.Itoa(i)]; !ok && i%50 != 0 {
			lost++
		}
	}
	mu.Unlock()
	t.Logf("%d messages: %d completed at once, %d parked of which %d replayed, %d to the failure queue; lost %d",
		n, completedMain, parkedA, replayed, failedA+failedB, lost)
	if lost != 0 || failedA+failedB != n/50 {
		t.Fatalf("lost %d, failure queue %d (want %d)", lost, failedA+failedB, n/50)
	}
}

// runUntilSettled runs the main pipeline until every message of "in" is
// completed, parked or failed.
func runUntilSettled(t *testing.T, run func(string, string, bool, func() bool) (int64, int64),
	count func(string) int, n int) (parked, failed int64) {
	t.Helper()
	start := time.Now()
	// The sinks' counts are known only at the end, so stop when every
	// message the service accepts is done or, as parked ones never are here,
	// after the service has been back long enough for the rest to settle.
	settled := func() bool {
		return time.Since(start) > 3*time.Second || count("main") >= n-n/50
	}
	parked, failed = run("main", "in", false, settled)
	if got := int64(count("main")) + parked + failed; got < int64(n) {
		t.Fatalf("main pipeline settled %d of %d", got, n)
	}
	return parked, failed
}

// TestParkingFuncDelaysPerMessage: NewParkingFunc asks for each message's
// replay delay; a panic there writes the record due at once, and a nil
// function is a configuration error naming it.
func TestParkingFuncDelaysPerMessage(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "retry")
	tr := stream.NewTracker(0)
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	stream.To(stream.From(g, inputs(tr, input{value: []byte("soon-and-larger-than-16"), key: "soon"},
		input{value: []byte("later-and-larger-than-16"), key: "later"}, input{value: []byte("panicking-and-larger-than-16"), key: "panic"})),
		rejectLarge("service unavailable"))
	delays := map[string]time.Duration{"soon": time.Minute, "later": time.Hour}
	park := kafkasink.NewParkingFunc(client(t, brokers), "retry", func(m *stream.Message[stream.Failure]) time.Duration {
		d, ok := delays[string(m.Key)]
		if !ok {
			panic("no delay for " + string(m.Key))
		}
		return d
	})
	stream.To(g.Failures(), park)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.Parked] != 3 {
		t.Fatalf("settled %+v", st.Settled)
	}
	for _, r := range readAll(t, brokers, "retry", 3) {
		h := headerMap(r)
		key := string(r.Key)
		if key == "panic" {
			if _, ok := h[kafkasink.HeaderReplayAt]; ok || string(r.Value) != "panicking-and-larger-than-16" {
				t.Fatalf("record of a panicking delay: value %q, headers %v", r.Value, h)
			}
			continue
		}
		replayAt, err1 := time.Parse(time.RFC3339Nano, h[kafkasink.HeaderReplayAt])
		failedAt, err2 := time.Parse(time.RFC3339Nano, h[kafkasink.HeaderFailedAt])
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: headers %v", key, h)
		}
		if got := replayAt.Sub(failedAt); got < delays[key] || got > delays[key]+time.Minute {
			t.Fatalf("%s is due %v after its failure, want %v", key, got, delays[key])
		}
	}

	g = stream.New()
	stream.To(stream.From(g, inputs(tr)), rejectLarge("x"))
	stream.To(g.Failures(), kafkasink.NewParkingFunc(client(t, brokers), "retry", nil))
	if err := g.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "replayAfter") {
		t.Fatalf("Run with a nil replayAfter = %v, want an error naming it", err)
	}
}

// ReplayDue brings a parked message forward once the dependency of the
// stage it failed at came back after its parking; otherwise it is due at
// its replay time.
func TestReplayDueAfterRecovery(t *testing.T) {
	failed := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	replayAt := failed.Add(time.Minute)
	env := func(stage string) *stream.Envelope {
		m := stream.NewMessage([]byte("x"), stream.Handle{})
		m.Headers = []stream.Header{{Key: kafkasink.HeaderStage, Value: []byte(stage)},
			{Key: kafkasink.HeaderFailedAt, Value: []byte(failed.Format(time.RFC3339Nano))},
			{Key: kafkasink.HeaderReplayAt, Value: []byte(replayAt.Format(time.RFC3339Nano))}}
		return &m.Envelope
	}
	back := map[string]time.Time{"drones": failed.Add(time.Second), "packages": failed.Add(-time.Second)}
	due := kafkasink.ReplayDue(func(stage string) time.Time { return back[stage] })
	for stage, want := range map[string]time.Time{"drones": {}, "packages": replayAt, "accounts": replayAt} {
		if got := due(env(stage)); !got.Equal(want) {
			t.Errorf("failed at %s: due %v, want %v", stage, got, want)
		}
	}
	plain := stream.NewMessage([]byte("x"), stream.Handle{})
	if got := due(&plain.Envelope); !got.IsZero() {
		t.Errorf("a message without parking headers: due %v, want now", got)
	}
	// A message its service asked to wait (a Retry-After: HeaderNotBefore)
	// is not brought before that, nor after its replay time.
	for _, c := range []struct {
		notBefore, want time.Time
	}{{failed.Add(20 * time.Second), failed.Add(20 * time.Second)}, {failed.Add(time.Hour), replayAt}} {
		e := env("drones")
		e.Headers = append(e.Headers, stream.Header{Key: kafkasink.HeaderNotBefore, Value: []byte(c.notBefore.Format(time.RFC3339Nano))})
		if got := due(e); !got.Equal(c.want) {
			t.Errorf("asked to wait until %v, its service back since: due %v, want %v", c.notBefore, got, c.want)
		}
	}
}

// After the dependency of the stage a message was parked at recovered, its
// next parking waits the first delay: its parkings were the outage's. One
// parked since, on no recovery, or on another stage's, keeps its doubled
// delay; a Retry-After it asked still counts.
func TestBackoffRestartsAfterARecovery(t *testing.T) {
	failed := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	msg := func(topic string, err error) *stream.Message[stream.Failure] {
		m := stream.NewMessage(stream.Failure{Err: err, Transient: true}, stream.Handle{})
		m.Topic = topic
		m.Headers = []stream.Header{{Key: kafkasink.HeaderParkings, Value: []byte("5")},
			{Key: kafkasink.HeaderStage, Value: []byte("drones")},
			{Key: kafkasink.HeaderFailedAt, Value: []byte(failed.Format(time.RFC3339Nano))}}
		return &m
	}
	down := errors.New("down")
	for _, c := range []struct {
		name  string
		stage string
		back  time.Time
		m     *stream.Message[stream.Failure]
		want  time.Duration
	}{
		{"recovered since its parking", "drones", failed.Add(time.Second), msg("parked", down), 2 * time.Second},
		{"recovered since, a Retry-After", "drones", failed.Add(time.Second), msg("parked", stream.Throttled(down, 5*time.Second)), 5 * time.Second},
		{"recovered before its parking", "drones", failed.Add(-time.Second), msg("parked", down), time.Minute},
		{"never recovered", "drones", time.Time{}, msg("parked", down), time.Minute},
		{"another stage recovered", "accounts", failed.Add(time.Second), msg("parked", down), time.Minute},
		{"not a replay", "drones", failed.Add(time.Second), msg("requests", down), 2 * time.Second},
	} {
		backoff := kafkasink.BackoffRestarting("parked", 2*time.Second, time.Minute, func(stage string) time.Time {
			if stage == c.stage {
				return c.back
			}
			return time.Time{}
		})
		// A Retry-After is waited with up to 20% of jitter (and a
		// little of it passed since the failure).
		if got := backoff(c.m); got != c.want && (stream.Classify(c.m.Value.Err).RetryAfter == 0 ||
			got < c.want-time.Second || got > c.want+c.want/5) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
