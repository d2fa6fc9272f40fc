package checkpoint_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a Committer that counts its calls and can be made to fail or
// to take time.
type counter struct {
	calls atomic.Int64
	fail  atomic.Bool
	delay time.Duration
}

func (c *counter) Commit(ctx context.Context) error {
	c.calls.Add(1)
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if c.fail.Load() {
		return errors.New("broker unavailable")
	}
	return nil
}

func TestContract(t *testing.T) {
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New:   func(*testing.T) stream.Sink[int] { return checkpoint.New[int](&counter{}) },
		Value: func(i int) int { return i },
	})
}

func TestCommitsEveryNAndOnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &counter{}
		ch := make(chan int)
		g := stream.New()
		stream.To(stream.From(g, source.Channel(ch)), checkpoint.New[int](c, checkpoint.Every(100), checkpoint.Interval(time.Second)))
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		for i := range 100 {
			ch <- i
		}
		synctest.Wait()
		if n := c.calls.Load(); n != 1 {
			t.Fatalf("%d commits after 100 messages, want 1 (Every)", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := c.calls.Load(); n != 2 {
			t.Fatalf("%d commits after the interval, want 2", n)
		}
		close(ch)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := c.calls.Load(); n != 3 {
			t.Fatalf("%d commits after the input ended, want 3 (final)", n)
		}
	})
}

func TestSlowCommitsDoNotBlockTheSink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &counter{delay: time.Hour} // a broker that never answers
		tr := stream.NewTracker(0)
		vals := make([]int, 10_000)
		ck := checkpoint.New[int](c, checkpoint.Every(10), checkpoint.FinalTimeout(time.Minute))
		g := stream.New()
		stream.To(stream.From(g, source.Slice(vals, source.Track(tr))), ck)
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		synctest.Wait()
		// Every message was settled while the first commit hangs.
		if st := tr.Stats(); st.Settled[stream.Completed] != 10_000 {
			t.Fatalf("settled %d of 10000 while a commit hangs", st.Settled[stream.Completed])
		}
		time.Sleep(2 * time.Hour)
		<-done
	})
}

func TestFailedCommitsAreCountedAndFinalFailureReported(t *testing.T) {
	c := &counter{}
	c.fail.Store(true)
	ck := checkpoint.New[int](c, checkpoint.Every(1))
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{1, 2, 3})), ck, stream.Name("ckpt"))
	err := g.Run(context.Background())
	if err == nil || ck.Stats().Failures == 0 {
		t.Fatalf("Run = %v, stats %+v: want the final commit's failure reported", err, ck.Stats())
	}
	t.Log(err)
}
