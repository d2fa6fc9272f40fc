package source_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// A priority source publishes its numbers by level: what it took and
// handed on, what waits in it and at the broker, and which levels are
// held back there.
func TestPriorityStatsByLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		bs := []*brokerLevel{{level: 0, n: n, topic: "high", lagging: true}, {level: 1, n: n, topic: "low", lagging: true}}
		levels := []source.Level[int]{{Name: "high", Source: bs[0]}, {Name: "low", Source: bs[1]}}
		g := stream.New(stream.WithPipeline("p"), stream.WithBatchSize(1), stream.WithCapacity(1))
		gate := make(chan struct{})
		first := true
		stream.To(source.Priority(g, backpressure.StrictPriority(2), levels, stream.Buffer(64)),
			sink.Func(func(_ context.Context, v int) error {
				if first {
					<-gate
					first = false
				}
				time.Sleep(time.Millisecond)
				return nil
			}))
		m, err := observe.New(prometheus.NewRegistry(), "p")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Register(g); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		values := func() map[string]map[string]float64 {
			out := map[string]map[string]float64{}
			for _, l := range m.Levels() {
				if l.Stage == "priority" {
					out[l.Priority] = l.Values
				}
			}
			return out
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		v := values()
		if len(v) != 2 {
			t.Fatalf("levels %v, want 0 and 1", v)
		}
		if v["1"]["priority_paused"] != 1 || v["1"]["priority_pauses_total"] != 1 || v["0"]["priority_paused"] != 0 {
			t.Errorf("while high waits: %v, want low paused once, high not", v)
		}
		if v["0"]["priority_queued"] < 1 || v["1"]["priority_queued"] < 32 || v["1"]["priority_lag"] < 1 || v["0"]["priority_lag"] < 1 {
			t.Errorf("while high waits: %v, want both levels queued (low's pipe at least half full) and lagging", v)
		}
		close(gate)
		for bs[1].sent.Load() < n || values()["1"]["priority_emitted_total"] < n {
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		v = values()
		for _, l := range []string{"0", "1"} {
			if v[l]["priority_received_total"] != n || v[l]["priority_emitted_total"] != n || v[l]["priority_queued"] != 0 ||
				v[l]["priority_lag"] != 0 || v[l]["priority_paused"] != 0 {
				t.Errorf("level %s at the end: %v, want %d received and emitted, nothing queued, lagging or paused", l, v[l], n)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
