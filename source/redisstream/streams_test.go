package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// One source reads several streams with one XREADGROUP: every entry of
// each arrives once, with its stream as Topic, and is acknowledged. With
// less room than streams (MaxInFlight 2 over 3 streams) it reads them in
// turn and never holds more than 2.
func TestSeveralStreams(t *testing.T) {
	c := client(t, testenv.Redis(t))
	for _, maxInFlight := range []int{0, 2} {
		t.Run(fmt.Sprintf("MaxInFlight %d", maxInFlight), func(t *testing.T) {
			names := []string{}
			for _, s := range []string{"a", "b", "c"} {
				names = append(names, fmt.Sprintf("%s-%d", s, maxInFlight))
			}
			const n = 200
			for _, name := range names {
				produce(t, c, name, 0, n)
			}
			src := newSource(t, redisstream.Config{Client: c, Streams: names, Group: "g", Consumer: "c", Create: true,
				MaxInFlight: maxInFlight, Block: 50 * time.Millisecond})
			r := run(t, src, true)
			r.await(t, "every entry of the three streams", count(3*n))
			waitFor(t, "every entry acknowledged", func() bool {
				for _, name := range names {
					if len(pendingIDs(t, c, name, "g")) != 0 {
						return false
					}
				}
				return true
			})
			r.stop()
			seen := map[string]map[int]int{}
			for _, m := range r.received() {
				if seen[m.Topic] == nil {
					seen[m.Topic] = map[int]int{}
				}
				seen[m.Topic][index(m.Value)]++
			}
			for _, name := range names {
				if len(seen[name]) != n {
					t.Errorf("stream %s: %d distinct entries, want %d", name, len(seen[name]), n)
				}
				for i, k := range seen[name] {
					if k != 1 {
						t.Errorf("stream %s entry %d arrived %d times", name, i, k)
					}
				}
			}
			if maxInFlight > 0 {
				for _, st := range src.Stats().Streams {
					if st.Acked != n {
						t.Errorf("stream %s acked %d, want %d", st.Stream, st.Acked, n)
					}
				}
			}
		})
	}
}

// Two sources, one per stream, as the levels of a priority source: every
// entry of each arrives tagged with its level, and is acknowledged.
func TestPriorityOfTwoStreams(t *testing.T) {
	c := client(t, testenv.Redis(t))
	const n = 300
	produce(t, c, "urgent", 0, n)
	produce(t, c, "bulk", 0, n)
	cfg := func(name string) redisstream.Config {
		return redisstream.Config{Client: c, Streams: []string{name}, Group: "g", Consumer: "c", Create: true, Block: 50 * time.Millisecond}
	}
	levels := []source.Level[[]byte]{
		{Name: "urgent", Source: newSource(t, cfg("urgent"))},
		{Name: "bulk", Source: newSource(t, cfg("bulk"))},
	}
	g := stream.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	got := map[string]map[int]bool{"urgent": {}, "bulk": {}}
	var wrong []string
	stream.To(source.Priority(g, backpressure.StrictPriority(2), levels), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			for i := range b.Items {
				m := &b.Items[i]
				in.Settle(m, stream.Completed)
				mu.Lock()
				if want := map[string]uint8{"urgent": 0, "bulk": 1}[m.Topic]; m.Priority != want {
					wrong = append(wrong, fmt.Sprintf("%s/%s tagged %d", m.Topic, m.Value, m.Priority))
				}
				got[m.Topic][index(m.Value)] = true
				if len(got["urgent"]) == n && len(got["bulk"]) == n {
					cancel()
				}
				mu.Unlock()
			}
			b.Release()
		}
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("waited 30 s: %d urgent and %d bulk entries arrived of %d each", len(got["urgent"]), len(got["bulk"]), n)
	}
	if len(wrong) > 0 {
		t.Fatalf("messages tagged with the wrong level: %v", wrong[:min(5, len(wrong))])
	}
	for _, l := range levels {
		if err := l.Source.(*redisstream.Source).Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"urgent", "bulk"} {
		if p := pendingIDs(t, c, name, "g"); len(p) != 0 {
			t.Errorf("stream %s: %d entries still pending after Commit", name, len(p))
		}
	}
}
