package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// Close is bounded by its ctx. After the pipeline's Run has returned,
// records it sent and never settled (a sink that ended with them, a drain
// cut short) will never be settled: leaving the group revokes their
// partitions, and that revocation must not wait HandoverWait for them.
// Here HandoverWait is an hour (a slow pipeline's setting) and Close's ctx
// ends after 2 s.
func TestCloseDoesNotWaitHandoverForAPipelineThatHasEnded(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", 100, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := newSource(t, brokers, "close-handover", func(c *kafka.Config) { c.HandoverWait = time.Hour })
	h := &holder{}
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	eventually(t, "the records held", func() bool { return src.Stats().Records == 100 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		closed <- src.Close(cctx)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still running 30 s after it was called with a 2 s ctx: the leave waits HandoverWait (1 h) for records the ended pipeline will never settle")
	}
}
