package kafka_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// holdPromises is a franz-go hook that holds every record's promise until
// release is closed.
type holdPromises struct{ release chan struct{} }

func (h holdPromises) OnProduceRecordUnbuffered(*kgo.Record, error) { <-h.release }

// TestRunWaitsForPromisesOfRecordsFailedBeforeBuffering: franz-go fails a
// record larger than MaxBufferedBytes before buffering it, and runs its
// promise on a goroutine of its own that Client.Flush does not wait for.
// The sink's Run must still wait for that promise and fail the message to
// the failure stream, not return with the message unsettled.
//
// The promise is held until every goroutine of the test is blocked
// (synctest.Wait): then either Run has returned without it, or Run is
// waiting for it, as it should. The client never needs the broker (the
// record fails before it is partitioned), so nothing blocks on the network.
func TestRunWaitsForPromisesOfRecordsFailedBeforeBuffering(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	synctest.Test(t, func(t *testing.T) {
		hold := holdPromises{release: make(chan struct{})}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxBufferedBytes(1<<10), kgo.WithHooks(hold))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		tr := stream.NewTracker(0)
		g := stream.New()
		stream.To(stream.From(g, source.Slice([][]byte{bytes.Repeat([]byte("x"), 4<<10)}, source.Track(tr))),
			kafkasink.NewSink(cl, kafkasink.Records("out")))
		var (
			mu      sync.Mutex
			reasons []string
		)
		stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
			mu.Lock()
			reasons = append(reasons, m.Value.Err.Error())
			mu.Unlock()
			return nil
		}))
		done := make(chan error, 1)
		go func() { done <- g.Run(context.Background()) }()
		synctest.Wait()
		close(hold.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 {
			t.Fatalf("after Run returned: settled %+v, failures %q; want the message failed and dead-lettered", st.Settled, reasons)
		}
		if len(reasons) != 1 || !strings.Contains(reasons[0], "MESSAGE_TOO_LARGE") {
			t.Fatalf("failures %q", reasons)
		}
	})
}

// A record that fails while no more input comes (a quiet failure topic)
// is handled at once: its message is failed to the failure stream, not
// left unsettled until the next message or the end of the input.
func TestFailureIsHandledWithoutMoreInput(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxBufferedBytes(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tr := stream.NewTracker(0)
	ch := make(chan []byte, 1)
	g := stream.New()
	stream.To(stream.From(g, source.Channel(ch, source.Track(tr))), kafkasink.NewSink(cl, kafkasink.Records("out")))
	failed := make(chan string, 1)
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		failed <- m.Value.Err.Error()
		return nil
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	ch <- bytes.Repeat([]byte("x"), 4<<10)
	select {
	case reason := <-failed:
		if !strings.Contains(reason, "MESSAGE_TOO_LARGE") {
			t.Fatalf("failure %q", reason)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the failed record's message is still unsettled while the input waits for more")
	}
	close(ch)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
}
