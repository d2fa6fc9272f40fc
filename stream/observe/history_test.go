package observe_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// series returns the values of one series of a pipeline, nil if absent.
func series(st observe.HistoryStatus, pipeline, kind, stage, name string) []float64 {
	for _, p := range st.Pipelines {
		if p.Name != pipeline {
			continue
		}
		for _, s := range p.Series {
			if s.Kind == kind && s.Stage == stage && s.Name == name {
				return s.Values
			}
		}
	}
	return nil
}

// A stage's rate is its throughput: what it handled per second, whether
// it hands messages on (parse, double), settles them (the sink) or fails
// them; a source's rate is what it emitted.
func TestHistoryRateIsThroughput(t *testing.T) {
	const n = 1000
	g := stream.New(stream.WithPipeline("rates"), stream.WithLogger(quiet))
	s := stream.From(g, source.Slice(make([]int, n)), stream.Name("read"))
	s = stream.Via(s, flow.Map(func(x int) (int, error) { return x, nil }), stream.Name("parse"))
	s = stream.Via(s, flow.Map(func(x int) (int, error) { return x * 2, nil }), stream.Name("double"))
	stream.To(s, sink.Discard[int](), stream.Name("store"))
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "rates")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	h := observe.NewHistory([]*stream.Graph{g}, []*observe.Metrics{m}, time.Second, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	h.Sample(t0)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.Sample(t0.Add(2 * time.Second))
	st := h.Snapshot()
	if len(st.Times) != 2 {
		t.Fatalf("%d samples, want 2", len(st.Times))
	}
	for _, stage := range []string{"read", "parse", "double", "store"} {
		v := series(st, "rates", observe.SeriesHandled, stage, "")
		if len(v) != 2 || !math.IsNaN(v[0]) || v[1] != n/2 {
			t.Errorf("%s: handled %v, want [NaN %d] (the first sample has no rate)", stage, v, n/2)
		}
		if v := series(st, "rates", observe.SeriesInFlight, stage, ""); len(v) != 2 || v[1] != 0 {
			t.Errorf("%s: in flight %v after the run, want 0", stage, v)
		}
	}
	if v := series(st, "rates", observe.SeriesReceived, "parse", ""); len(v) != 2 || v[1] != n/2 {
		t.Errorf("parse: received %v, want %d/s", v, n/2)
	}
	if v := series(st, "rates", observe.SeriesOutcome, "", "completed"); len(v) != 2 || v[1] != n/2 {
		t.Errorf("completed: %v, want %d/s", v, n/2)
	}
}

// The history keeps window/interval samples, oldest first, whatever the
// number of samples taken; a series absent for a whole window is dropped.
func TestHistoryRingIsBounded(t *testing.T) {
	g := stream.New(stream.WithPipeline("ring"), stream.WithLogger(quiet))
	stream.To(stream.From(g, source.Slice([]int{1, 2, 3}), stream.Name("read")), sink.Discard[int](), stream.Name("store"))
	h := observe.NewHistory([]*stream.Graph{g}, nil, time.Second, 10*time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 35 {
		h.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	st := h.Snapshot()
	if len(st.Times) != 10 || st.WindowSeconds != 10 || st.IntervalSeconds != 1 {
		t.Fatalf("%d samples over %vs every %vs, want 10 over 10s every 1s", len(st.Times), st.WindowSeconds, st.IntervalSeconds)
	}
	for i, at := range st.Times {
		if want := float64(t0.Unix() + 25 + int64(i)); at != want {
			t.Fatalf("sample %d at %v, want %v (the last 10, oldest first)", i, at, want)
		}
	}
	for _, p := range st.Pipelines {
		for _, s := range p.Series {
			if len(s.Values) != 10 {
				t.Errorf("%s %s: %d values, want 10", s.Kind, s.Stage, len(s.Values))
			}
		}
	}
	if series(st, "ring", observe.SeriesInFlight, "store", "") == nil {
		t.Error("no in-flight series of the sink")
	}
}

// /history.json encodes a missing value as null and reads back as it was
// sampled; /status.json gives each stage's throughput and inputs.
func TestHistoryJSON(t *testing.T) {
	g := stream.New(stream.WithPipeline("json"), stream.WithLogger(quiet))
	a := stream.From(g, source.Slice(make([]int, 40)), stream.Name("high"))
	b := stream.From(g, source.Slice(make([]int, 60)), stream.Name("low"))
	stream.To(stream.Merge(a, b), sink.Discard[int](), stream.Name("store"))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := observe.Handler(observe.ServerConfig{Graphs: []*stream.Graph{g}, HistoryInterval: time.Nanosecond, HistoryWindow: 10 * time.Nanosecond})
	get := func(path string, v any) string {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, mustRequest(t, path))
		if rec.Code != 200 {
			t.Fatalf("%s: %d", path, rec.Code)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, rec.Body.String())
		}
		return rec.Body.String()
	}
	var hs observe.HistoryStatus
	get("/history.json", &hs)
	var st observe.Status
	get("/status.json", &st)
	if body := get("/history.json", &hs); !strings.Contains(body, `"values":[null,`) {
		t.Errorf("the first sample's rates are not null:\n%s", body)
	}
	if len(hs.Times) < 2 {
		t.Fatalf("%d samples after three requests", len(hs.Times))
	}
	if v := series(hs, "json", observe.SeriesHandled, "store", ""); len(v) < 2 || !math.IsNaN(v[0]) || v[len(v)-1] != 0 {
		t.Errorf("store: handled %v, want null first, then 0 (the run ended before)", v)
	}
	for _, s := range st.Pipelines[0].Stages {
		if s.Name == "store" {
			if fmt.Sprint(s.Inputs) != "[high low]" {
				t.Errorf("store: inputs %v, want [high low]", s.Inputs)
			}
			if s.Rate == nil {
				t.Error("store: no rate in /status.json after two samples")
			}
		}
	}
}

// A sink that settles on another goroutine (a producer's callback, as the
// Kafka dead letter does) and the failure path's stages hold nothing once
// the pipeline is idle: in flight returns to 0 while the pipeline runs.
func TestInFlightReturnsToZeroWhenIdle(t *testing.T) {
	const n = 500
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := stream.New(stream.WithPipeline("idle"), stream.WithLogger(quiet))
	// The source sends n, then waits: the pipeline is idle, not ended.
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for i := range n {
			if err := out.Send(ctx, stream.Message[int]{Value: i}); err != nil {
				return err
			}
		}
		if err := out.Flush(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	s := stream.From(g, src, stream.Name("read"))
	s = stream.Via(s, flow.Map(func(x int) (int, error) {
		if x%5 == 0 {
			return 0, errors.New("invalid")
		}
		return x, nil
	}), stream.Name("parse"))
	stream.To(s, sink.Discard[int](), stream.Name("store"))
	var wg sync.WaitGroup
	stream.To(g.Failures(), stream.SinkFunc[stream.Failure](func(ctx context.Context, in *stream.Inlet[stream.Failure]) error {
		defer wg.Wait()
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for _, m := range b.Items {
				wg.Add(1)
				go func() { // acknowledged later, elsewhere
					defer wg.Done()
					in.SettleAsync(&m, stream.DeadLettered)
				}()
			}
			b.Release()
		}
	}), stream.Name("dead-letters"))
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	srv := observe.Handler(observe.ServerConfig{Graphs: []*stream.Graph{g}})
	deadline := time.Now().Add(20 * time.Second)
	var st observe.Status
	for {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, mustRequest(t, "/status.json"))
		st = observe.Status{}
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		settled := int64(0)
		for _, s := range st.Pipelines[0].Stages {
			settled += s.Settled
		}
		if settled == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range st.Pipelines[0].Stages {
		if s.InFlight != 0 {
			t.Errorf("%s: %d in flight with the pipeline idle (in %d, out %d, settled %d, failed %d)",
				s.Name, s.InFlight, s.In, s.Out, s.Settled, s.Failed)
		}
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}

func mustRequest(t *testing.T, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, path, io.NopCloser(strings.NewReader("")))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// partitions publishes the lag of many partitions: more series than a
// history keeps.
type partitions struct{ n int }

func (p partitions) Run(ctx context.Context, out *stream.Outlet[int]) error { return nil }

func (p partitions) Instrument(stage string, m stream.Meter) {
	m.Collect(func(w stream.MetricWriter) {
		for i := range p.n {
			w.Gauge("sluice_kafka_lag", "Lag.", float64(i), stream.Label{Name: "stage", Value: stage},
				stream.Label{Name: "topic", Value: "in"}, stream.Label{Name: "partition", Value: fmt.Sprint(i)})
		}
	})
}

// However many partitions a pipeline has, the history keeps at most
// MaxHistorySeries series.
func TestHistorySeriesAreBounded(t *testing.T) {
	g := stream.New(stream.WithPipeline("wide"), stream.WithLogger(quiet))
	stream.To(stream.From(g, stream.Source[int](partitions{n: observe.MaxHistorySeries + 500}), stream.Name("read")),
		sink.Discard[int](), stream.Name("store"))
	m, err := observe.New(prometheus.NewRegistry(), "wide")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	h := observe.NewHistory([]*stream.Graph{g}, []*observe.Metrics{m}, time.Second, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		h.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	st := h.Snapshot()
	n, lags := len(st.Pipelines[0].Series), 0
	for _, s := range st.Pipelines[0].Series {
		if s.Kind == observe.SeriesLag {
			lags++
		}
	}
	if n > observe.MaxHistorySeries || lags < observe.MaxHistorySeries/2 {
		t.Errorf("%d series (%d of lag), want at most %d", n, lags, observe.MaxHistorySeries)
	}
	if v := series(st, "wide", observe.SeriesLag, "", "in/2"); len(v) != 3 || v[2] != 2 {
		t.Errorf("lag of in/2: %v, want 2", v)
	}
}

// With GraphsFunc, the endpoints follow the pipelines as they come and
// go: one started after the handler was made is listed and sampled, one
// gone leaves /status.json and /history.json.
func TestHandlerFollowsGraphsThatChange(t *testing.T) {
	pipeline := func(name string, n int) *stream.Graph {
		g := stream.New(stream.WithPipeline(name), stream.WithLogger(quiet))
		stream.To(stream.From(g, source.Slice(make([]int, n)), stream.Name("read")), sink.Discard[int](), stream.Name("store"))
		if err := g.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return g
	}
	var mu sync.Mutex
	current := []*stream.Graph{pipeline("w1", 10), pipeline("w2", 20)}
	srv := observe.Handler(observe.ServerConfig{HistoryInterval: time.Nanosecond, HistoryWindow: time.Minute,
		GraphsFunc: func() []*stream.Graph {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(current)
		}})
	names := func(path string) []string {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, mustRequest(t, path))
		var v struct {
			Pipelines []struct{ Name string } `json:"pipelines"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, rec.Body.String())
		}
		var ns []string
		for _, p := range v.Pipelines {
			ns = append(ns, p.Name)
		}
		return ns
	}
	for _, path := range []string{"/status.json", "/history.json"} {
		if got := fmt.Sprint(names(path)); got != "[w1 w2]" {
			t.Errorf("%s lists %s, want [w1 w2]", path, got)
		}
	}
	mu.Lock()
	current = []*stream.Graph{current[0], pipeline("w3", 30)} // w2 stopped, w3 joined
	mu.Unlock()
	for _, path := range []string{"/status.json", "/history.json"} {
		if got := fmt.Sprint(names(path)); got != "[w1 w3]" {
			t.Errorf("after w2 stopped and w3 joined, %s lists %s, want [w1 w3]", path, got)
		}
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, mustRequest(t, "/history.json"))
	var hs observe.HistoryStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &hs); err != nil {
		t.Fatal(err)
	}
	if v := series(hs, "w3", observe.SeriesInFlight, "store", ""); len(v) == 0 {
		t.Errorf("w3, which joined after the handler was made, has no history: %+v", hs.Pipelines)
	}
}
