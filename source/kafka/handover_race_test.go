package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// holdFirstSpan holds the end of the first receive span (the source ends
// it while it builds the batch that carries the record downstream) until
// released: the source is then past its check that the partition is not
// being handed over, and has not sent the record yet.
type holdFirstSpan struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *holdFirstSpan) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (h *holdFirstSpan) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, a := range s.Attributes() {
		if a.Key == attribute.Key("messaging.kafka.offset") {
			h.once.Do(func() {
				close(h.held)
				<-h.release
			})
		}
	}
}
func (h *holdFirstSpan) Shutdown(context.Context) error   { return nil }
func (h *holdFirstSpan) ForceFlush(context.Context) error { return nil }

// A revocation that begins while the poll loop is between its check that
// the partition is not being handed over and the send of the records
// (here held in the record's receive span; in production the send waits
// for room downstream just as long, Outlet.Extend flushing a full batch)
// sees nothing sent, ends its HandoverWait at once, commits and hands the
// partition over. The poll loop then sends the records all the same: the
// old owner processes them (its settles ignored as late) and so does the
// new owner, although the wait (30 s here) was long enough to settle
// them. The docs promise no record processed twice on a graceful
// handover within HandoverWait.
func TestHandoverWaitsForRecordsBeingSentWhenItBegins(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	const n = 200
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	var mu sync.Mutex
	seen := map[string]int{}
	member := func(tp *sdktrace.TracerProvider) (src *kafka.Source, stop func()) {
		src = newSource(t, brokers, "handover-race", func(c *kafka.Config) {
			c.Balancer = kgo.RangeBalancer()
			c.HandoverWait = 30 * time.Second
			c.Opts = append(c.Opts, kgo.HeartbeatInterval(100*time.Millisecond))
		})
		var opts []stream.Option
		if tp != nil {
			opts = append(opts, stream.WithTracerProvider(tp))
		}
		return src, runCounting(t, src, opts, func(v []byte) {
			mu.Lock()
			seen[string(v)]++
			mu.Unlock()
		})
	}
	hold := &holdFirstSpan{held: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold.release) }) }
	defer release()
	a, stopA := member(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(hold)))
	select {
	case <-hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("A sent nothing")
	}
	_, stopB := member(nil)
	eventually(t, "A revoking its partition", func() bool { return a.Stats().Revoked > 0 })
	release()
	twice := processedTwiceOnceAll(t, &mu, seen, n, stopA, stopB)
	if st := a.Stats(); twice > 0 {
		t.Fatalf("%d records processed twice with HandoverWait 30 s; A's revocations %d, settles ignored as late %d", twice, st.Revoked, st.LateSettles)
	}
}
