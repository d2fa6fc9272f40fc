package supervisor_test

// Defects found in review, each test failing before its fix.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// hangingDeliveries never answers a delete: the service is black-holed
// (a dropped connection, a stuck load balancer). It counts the deletes.
type hangingDeliveries struct {
	delivery.Deliveries
	calls atomic.Int64
}

func (d *hangingDeliveries) Delete(ctx context.Context, _ string) error {
	d.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// One service that does not answer leaves nothing else booked, even with a
// retry policy that has an attempt timeout (docs/retry-policies.json's
// "interactive", selectable with `sluice run supervisor -retry-policy`).
// Before: the three undos ran one after the other within one attempt, so a
// hung delivery service used up every attempt and the drone cancel was
// made with an expired context, every attempt, every replay.
func TestHungUndoDoesNotStarveTheOthers(t *testing.T) {
	const id = "d-hang"
	var droneCancels atomic.Int64
	l, b := bookedServices(t, []string{id}, func(path string, _ int) int {
		if path == "/drones/"+id {
			droneCancels.Add(1)
		}
		return 0
	})
	dels := &hangingDeliveries{Deliveries: b.Deliveries}
	b.Deliveries = dels
	src, _ := eventSource(t, id)
	policy := quickRetry(3)
	policy.AttemptTimeout = 50 * time.Millisecond
	g, err := supervisor.New(supervisor.Config{Source: src, Committer: noCommit, Backends: b,
		Notifier: supervisor.NewNotifications(), Retry: policy, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = g.Run(runCtx) // no parking configured: stops with the event unsettled
	if !stream.IsFatal(err) {
		t.Fatalf("Run: %v, want the fatal stop of a compensation that could not be done", err)
	}
	t.Logf("delivery deletes %d, drone cancels that reached the drone service %d", dels.calls.Load(), droneCancels.Load())
	if l.Live("drones", id) || l.Live("packages", id) {
		t.Fatalf("drone booked %v, package live %v after %d attempts (drone cancels sent: %d): one hung service "+
			"(deliveries) kept every other undo from being made; Run said: %v",
			l.Live("drones", id), l.Live("packages", id), dels.calls.Load(), droneCancels.Load(), err)
	}
}

// A parked compensation holds back only the replays behind it in its
// partition. Before: flow.Delay waited for each message in turn, so a
// compensation parked for the 10th time (due in 10 min) made one parked
// once on another partition wait the 10 minutes, its drone booked
// although its service was back.
func TestLateReplayHoldsBackOnlyItsPartition(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(2, topicRetry), kfake.SeedTopics(1, topicDead))
	const slow, quick = "parked-10-times", "parked-once"
	l, b := bookedServices(t, []string{slow, quick}, func(path string, _ int) int {
		if strings.HasSuffix(path, "/"+slow) {
			return http.StatusServiceUnavailable // its service is still down
		}
		return 0
	})
	cl := kafkaClient(t, brokers)
	park := func(id string, partition int32, due time.Time, parkings int) {
		t.Helper()
		rec := &kgo.Record{Topic: topicRetry, Partition: partition, Key: []byte(id), Value: compensationEvent(t, id),
			Headers: []kgo.RecordHeader{
				{Key: kafkasink.HeaderReplayAt, Value: []byte(due.UTC().Format(time.RFC3339Nano))},
				{Key: supervisor.HeaderParkings, Value: []byte(fmt.Sprint(parkings))},
			}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// What the supervisor itself writes: the slow one on its 10th parking,
	// due in 10 minutes (DefaultMaxReplayDelay).
	manual := kgo.ManualPartitioner()
	cl = kafkaClient(t, brokers, kgo.RecordPartitioner(manual))
	park(slow, 0, time.Now().Add(10*time.Minute), 10)

	g, stop := buildSupervisor(t, brokers, b)
	// Wait until the slow record is held in the replay delay.
	waitFor(t, func() bool { return stageIn(g, "replay-delay") >= 1 }, func() string { return "slow record not read" })
	park(quick, 1, time.Now(), 1) // due now, another partition
	deadline := time.Now().Add(15 * time.Second)
	for l.Live("drones", quick) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	in, undone := stageIn(g, "replay-delay"), stageIn(g, "replay-undo")
	_ = stop()
	if l.Live("drones", quick) {
		t.Logf("replay-delay received %d, replay-undo received %d", in, undone)
		t.Fatalf("the compensation of %s (partition 1, due now) was not replayed within 15 s: it waits behind %s "+
			"(partition 0, due in 10 min)", quick, slow)
	}
}

// buildSupervisor starts the supervisor with a long replay delay cap and
// a short drain, returning its graph.
func buildSupervisor(t *testing.T, brokers []string, b delivery.Backends) (*stream.Graph, func() error) {
	t.Helper()
	return startSupervisor(t, brokers, b, settings{attempts: 1, maxParkings: 10, maxReplayDelay: 10 * time.Minute,
		drain: 100 * time.Millisecond})
}

// stageIn returns how many messages the named stage received.
func stageIn(g *stream.Graph, name string) int64 {
	for _, s := range g.Stats() {
		if s.Name == name {
			return s.In
		}
	}
	return 0
}

// An event on the failures topic that carries sluice-* headers of its own
// (one the supervisor once parked and an operator produced back with its
// headers, or any producer's) is parked with one set of headers of this
// parking. Before: the stale sluice-replay-at (here year 2999) came first
// and was obeyed, and the stale parking count counted.
func TestInheritedFailureHeadersAreReplaced(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	const id = "d-stale-headers"
	_, b := bookedServices(t, []string{id}, func(path string, _ int) int { return http.StatusServiceUnavailable })
	cl := kafkaClient(t, brokers)
	stale := time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := &kgo.Record{Topic: topicFailures, Key: []byte(id), Value: compensationEvent(t, id), Headers: []kgo.RecordHeader{
		{Key: kafkasink.HeaderReplayAt, Value: []byte(stale.Format(time.RFC3339Nano))},
		{Key: supervisor.HeaderParkings, Value: []byte("0")},
	}}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, stop := buildSupervisor(t, brokers, b)
	waitFor(t, func() bool { return caughtUp(t, cl, groupFailures, topicFailures, 1) }, func() string { return "event not parked" })
	_ = stop()
	parked := readAll(t, brokers, topicRetry, 1)
	if len(parked) == 0 {
		t.Fatal("nothing parked")
	}
	p := parked[0]
	n, parkings := 0, 0
	for _, h := range p.Headers {
		switch h.Key {
		case kafkasink.HeaderReplayAt:
			n++
		case supervisor.HeaderParkings:
			parkings++
		}
	}
	env := &stream.Envelope{Headers: toStreamHeaders(p.Headers)}
	due := kafkasink.ReplayAt(env)
	if n != 1 || due.Year() == 2999 || parkings != 1 || string(env.Header(supervisor.HeaderParkings)) != "1" {
		var hs []string
		for _, h := range p.Headers {
			if h.Key != kafkasink.HeaderReason {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
		}
		t.Fatalf("parked record has %d %s and %d %s headers; the replay reads due %v (want about now + 20ms): headers %v",
			n, kafkasink.HeaderReplayAt, parkings, supervisor.HeaderParkings, due, hs)
	}
}

func toStreamHeaders(hs []kgo.RecordHeader) []stream.Header {
	out := make([]stream.Header, len(hs))
	for i, h := range hs {
		out[i] = stream.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

// A parking the broker refuses (not a per-record error) stops the
// supervisor with the event unsettled; the failures topic is not committed
// past it.
func TestRefusedParkingIsNotCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for refused parkings to be retried: make test runs it, -short does not")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry),
		kfake.SeedTopics(1, topicDead))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var refused atomic.Int64
	var refusing atomic.Bool // once the events are written: only the supervisor's parkings are produced
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if !refusing.Load() { // (newer Produce versions name topics by id)
			return nil, nil, false
		}
		refused.Add(1)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	brokers := c.ListenAddrs()
	ids := []string{"a", "b", "c"}
	_, b := bookedServices(t, ids, func(path string, _ int) int {
		if path == "/drones/b" {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	_, at := produceEvents(t, brokers, ids)
	refusing.Store(true)
	_, stop := buildSupervisor(t, brokers, b)
	cl := kafkaClient(t, brokers)
	waitFor(t, func() bool { return refused.Load() > 0 }, func() string { return "no parking attempted" })
	err = stop()
	t.Logf("Run: %v", err)
	if got := committed(cl, groupFailures, topicFailures)[0]; got > at["b"].offset {
		t.Fatalf("failures topic committed at %d, past event b (offset %d) whose parking was refused", got, at["b"].offset)
	}
}
