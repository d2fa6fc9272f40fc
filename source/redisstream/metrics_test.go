package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// The source's metrics pass Prometheus' lint and count what happened, per
// stage and stream.
func TestMetrics(t *testing.T) {
	c := client(t, testenv.Redis(t))
	const n = 20
	produce(t, c, "m", 0, n)
	if err := c.XAdd(t.Context(), &redis.XAddArgs{Stream: "m", Values: []any{"other", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"m"}, Group: "g", Consumer: "c", Create: true,
		Block: 20 * time.Millisecond, MinIdle: 60 * time.Millisecond})
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "p")
	if err != nil {
		t.Fatal(err)
	}
	g := stream.New(stream.WithPipeline("p"))
	var got []stream.Message[[]byte]
	done := make(chan struct{})
	stream.To(stream.From(g, src, stream.Name("orders")), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		return drainAll(ctx, in, func(msg *stream.Message[[]byte]) {
			in.Settle(msg, stream.Completed)
			if got = append(got, *msg); len(got) == n {
				close(done)
			}
		})
	}))
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	<-done
	waitFor(t, "the acknowledgements, the dead letter and a look at the group", func() bool {
		st := src.Stats().Streams[0]
		return st.Acked == n && st.DeadLettered == 1 && st.Pending == 0 && st.Lag == 0
	})
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			// The read histogram has no stream label: one read serves
			// every stream of the source.
			if labels["stage"] != "orders" || labels["stream"] != "m" && mt.Histogram == nil {
				continue
			}
			switch {
			case mt.Counter != nil:
				values[f.GetName()] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				values[f.GetName()] = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				values[f.GetName()] = float64(mt.Histogram.GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"sluice_redisstream_read_total": n, "sluice_redisstream_acked_total": n, "sluice_redisstream_dead_lettered_total": 1,
		"sluice_redisstream_poison_total": 0, "sluice_redisstream_reclaimed_total": 0, "sluice_redisstream_in_flight": 0,
		"sluice_redisstream_pending": 0, "sluice_redisstream_lag": 0,
	} {
		if v, ok := values[name]; !ok || v != want {
			t.Errorf("%s = %v (published: %v), want %v", name, v, ok, want)
		}
	}
	if _, dl := fieldsOf(t, c, "m-dead-letters"); len(dl) != 1 || header(dl[0], "sluice-stage") != "orders" {
		t.Errorf("dead letters %q, want one with the instrumented stage's name", dl)
	}
	if values["sluice_redisstream_read_seconds"] < 1 {
		t.Errorf("sluice_redisstream_read_seconds has no observation")
	}
}
