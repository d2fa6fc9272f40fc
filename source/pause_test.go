package source_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// brokerLevel is a fake level read from a broker: it sends n messages of
// its level (the value), one at a time, and while paused it fetches
// nothing more; it stays open after its last message, as a Kafka source
// does, until the pipeline ends. It reports as lag what it has not sent,
// if lagging, plus any lag the test sets.
type brokerLevel struct {
	level, n int
	lagging  bool
	topic    string

	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed by ResumeReading
	pauses  int
	sent    atomic.Int64
	lag     atomic.Int64
}

var (
	_ source.Pausable    = (*brokerLevel)(nil)
	_ source.Lagger      = (*brokerLevel)(nil)
	_ source.TopicLister = (*brokerLevel)(nil)
)

func (b *brokerLevel) Run(ctx context.Context, out *stream.Outlet[int]) error {
	for range b.n {
		b.mu.Lock()
		paused, resumed := b.paused, b.resumed
		b.mu.Unlock()
		if paused {
			select {
			case <-resumed:
			case <-ctx.Done():
				return nil
			}
		}
		if err := out.Send(ctx, stream.NewMessage(b.level, stream.Handle{})); err != nil {
			return nil
		}
		b.sent.Add(1)
	}
	<-ctx.Done()
	return nil
}

func (b *brokerLevel) PauseReading() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.paused {
		b.paused, b.resumed = true, make(chan struct{})
		b.pauses++
	}
}

func (b *brokerLevel) ResumeReading() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused {
		b.paused = false
		close(b.resumed)
	}
}

func (b *brokerLevel) Lag() int64 {
	lag := b.lag.Load()
	if b.lagging {
		lag += int64(b.n) - b.sent.Load()
	}
	return lag
}

func (b *brokerLevel) Topics() []string {
	if b.topic == "" {
		return nil
	}
	return []string{b.topic}
}

func (b *brokerLevel) state() (paused bool, pauses int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused, b.pauses
}

// runLevels runs a priority source over the levels into a sink that waits
// for gate before its first message and then takes 1 ms a message (fake
// time), calling each(i, level) before taking message i. It returns the
// levels in the order served once Run has returned.
//
// Each level's pipe holds 64 messages: half of it, what a level has left
// when it is resumed, lasts longer than the 20 ms between two looks at
// the levels. (With 8, a resumed level could run dry before its resume
// and strict served the level below meanwhile, as it should.)
func runLevels(t *testing.T, ctx context.Context, p backpressure.Priority, bs []*brokerLevel, gate <-chan struct{},
	each func(i, level int)) <-chan []int {
	t.Helper()
	levels := make([]source.Level[int], len(bs))
	for i, b := range bs {
		levels[i] = source.Level[int]{Name: b.topic, Source: b}
	}
	g := stream.New(stream.WithBatchSize(1), stream.WithCapacity(1))
	var got []int
	stream.To(source.Priority(g, p, levels, stream.Buffer(64)), sink.Func(func(_ context.Context, v int) error {
		if len(got) == 0 {
			<-gate
		}
		each(len(got), v)
		got = append(got, v)
		time.Sleep(time.Millisecond)
		return nil
	}))
	done := make(chan []int, 1)
	go func() {
		if err := g.Run(ctx); err != nil {
			t.Error(err)
		}
		done <- got
	}()
	return done
}

// Strict, three backlogged levels: while high has messages waiting, normal
// and low are paused at their brokers; when high has drained, normal
// reads again and low waits for it; and everything is served, in order.
func TestPriorityPausesLowerLevelsWhileHighPresses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		high, normal, low := &brokerLevel{level: 0, n: n, topic: "high"}, &brokerLevel{level: 1, n: n, topic: "normal"},
			&brokerLevel{level: 2, n: n, topic: "low"}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		gate := make(chan struct{})
		check := func(at int, b *brokerLevel, wantPaused bool) {
			if p, _ := b.state(); p != wantPaused {
				t.Errorf("message %d: level %d paused %v, want %v", at, b.level, p, wantPaused)
			}
		}
		done := runLevels(t, ctx, backpressure.StrictPriority(3), []*brokerLevel{high, normal, low}, gate, func(i, _ int) {
			switch i {
			case n / 2: // half of high served
				check(i, high, false)
				check(i, normal, true)
				check(i, low, true)
			case n + n/2: // high done 50 ms ago, half of normal served
				check(i, normal, false)
				check(i, low, true)
			case 2*n + n/2:
				check(i, low, false)
			case 3*n - 1:
				cancel()
			}
		})
		// Everything that fits is waiting, downstream takes nothing yet.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		check(0, high, false)
		check(0, normal, true)
		check(0, low, true)
		lowSent := low.sent.Load()
		time.Sleep(100 * time.Millisecond)
		if s := low.sent.Load(); s != lowSent {
			t.Errorf("low sent %d more while paused", s-lowSent)
		}
		close(gate)
		got := <-done
		if len(got) != 3*n {
			t.Fatalf("served %d, want %d", len(got), 3*n)
		}
		// A few may pass before the backlog is complete; then strictly in order.
		for i := 5; i < len(got); i++ {
			if got[i] < got[i-1] {
				t.Fatalf("served level %d after %d at %d", got[i], got[i-1], i)
			}
		}
		for _, b := range []*brokerLevel{high, normal, low} {
			paused, pauses := b.state()
			if paused || (b.level == 0) != (pauses == 0) {
				t.Errorf("level %d: paused %v after the end, %d pauses", b.level, paused, pauses)
			}
		}
	})
}

// Weighted 3:1: a paused level is never starved of what it holds. Low,
// paused while high presses, still gets its quarter of the service from
// its pipe, fetches again when that is half empty, and is done while
// high is still backlogged.
func TestPriorityPausedLevelKeepsItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		high, low := &brokerLevel{level: 0, n: 800, lagging: true}, &brokerLevel{level: 1, n: 200}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		gate := make(chan struct{})
		done := runLevels(t, ctx, backpressure.WeightedPriority(3, 1), []*brokerLevel{high, low}, gate, func(i, _ int) {
			if i == 999 {
				cancel()
			}
		})
		time.Sleep(100 * time.Millisecond)
		if p, _ := low.state(); !p {
			t.Error("low not paused behind high's backlog")
		}
		close(gate)
		got := <-done
		lows, lastLow := 0, 0
		for i, l := range got {
			if l == 1 {
				lastLow = i
				if i >= 8 && i < 808 {
					lows++
				}
			}
		}
		if lows < 195 || lows > 205 {
			t.Errorf("low served %d of 800 picks while both were backlogged, want 200 (1:3)", lows)
		}
		if lastLow > 810 {
			t.Errorf("low's last message served at %d, want before high's backlog is gone (about 800)", lastLow)
		}
		if _, pauses := low.state(); pauses < 2 {
			t.Errorf("low paused %d times, want it paused again after each refill", pauses)
		}
	})
}

// A level whose pipe is empty but whose source lags presses too; and a
// level paused when the stage ends is resumed.
func TestPriorityPausesBehindALaggingLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		high, low := &brokerLevel{level: 0}, &brokerLevel{level: 1, n: 100}
		ctx, cancel := context.WithCancel(t.Context())
		gate := make(chan struct{})
		done := runLevels(t, ctx, backpressure.StrictPriority(2), []*brokerLevel{high, low}, gate, func(int, int) {})
		step := func(lag int64, wantPaused bool) {
			t.Helper()
			high.lag.Store(lag)
			time.Sleep(50 * time.Millisecond)
			if p, _ := low.state(); p != wantPaused {
				t.Fatalf("high's lag %d: low paused %v, want %v", lag, p, wantPaused)
			}
		}
		step(0, false)
		step(5, true)
		step(0, false)
		step(5, true)
		cancel()
		close(gate)
		<-done
		if p, pauses := low.state(); p || pauses != 2 {
			t.Fatalf("after the end: low paused %v, %d pauses; want resumed, 2", p, pauses)
		}
	})
}
