// Command watermill is the Watermill peer of the peers benchmark (issue 18;
// the protocol is in benchmarks/peers/runner): a Watermill router whose one
// handler makes the 2 ms call for each record of a watermill-kafka
// subscriber in a consumer group.
//
// What limits it: watermill-kafka v3.0.6 hands a partition's next message to
// the router only after the previous one was acked (processMessage blocks on
// msg.Acked() before reading the claim again), so at most one call per
// assigned partition is in flight, whatever the router or -inflight allow;
// more handlers or subscribers in the same group only split the partitions
// between them. The ceiling is partitions / call time (16 / 2 ms = 8,000
// records/s here). The keyed variant is therefore the same program: a
// partition's records are processed one at a time in offset order, which
// keeps a key's records in order (more strictly than asked).
//
// Commits: the subscriber calls Sarama's session.MarkMessage after the
// handler acked the message (the router acks after the handler returned
// nil), and Sarama's offset manager commits the marked offsets every
// Consumer.Offsets.AutoCommit.Interval (1 s) and when the session ends.
// Marks follow offsets in order, so a committed offset never passes a call
// that has not finished: at least once.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// receivedKey is the metadata entry where the unmarshaler stamps the time
// the record came out of Sarama (Unix nanoseconds).
const receivedKey = "peers_received_ns"

// stampingUnmarshaler is watermill-kafka's DefaultMarshaler that also
// records when the subscriber took the record from its client (and prints
// the "first" line on the first one).
type stampingUnmarshaler struct {
	kafka.DefaultMarshaler
	st *stats
}

func (u stampingUnmarshaler) Unmarshal(m *sarama.ConsumerMessage) (*message.Message, error) {
	u.st.first()
	now := time.Now().UnixNano()
	msg, err := u.DefaultMarshaler.Unmarshal(m)
	if err == nil {
		msg.Metadata.Set(receivedKey, strconv.FormatInt(now, 10))
	}
	return msg, err
}

type stats struct {
	firstOnce sync.Once
	firstNs   atomic.Int64

	inflight, maxInflight atomic.Int64

	mu        sync.Mutex
	perPart   map[int32]int64
	latency   []int64 // done - max(record timestamp, first), ns
	inproc    []int64 // done - received, ns
	processed int64
}

func (s *stats) first() {
	s.firstOnce.Do(func() {
		now := time.Now()
		s.firstNs.Store(now.UnixNano())
		fmt.Printf("{\"event\":\"first\",\"unix_ms\":%d}\n", now.UnixMilli())
	})
}

func (s *stats) done(part int32, ts, received, done int64) {
	from := max(ts, s.firstNs.Load())
	s.mu.Lock()
	s.perPart[part]++
	s.processed++
	s.latency = append(s.latency, done-from)
	s.inproc = append(s.inproc, done-received)
	s.mu.Unlock()
}

func quantileMs(v []int64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(q * float64(len(v)-1))
	return float64(v[i]) / 1e6
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap broker, host:port")
	topic := flag.String("topic", "peers", "topic to consume")
	group := flag.String("group", "", "consumer group")
	order := flag.String("order", "unordered", "unordered|key")
	inflight := flag.Int("inflight", 256, "at most this many calls in flight")
	work := flag.Duration("work", 2*time.Millisecond, "each record's call: a timer wait")
	flag.Parse()
	if *brokers == "" || *group == "" || (*order != "unordered" && *order != "key") || *inflight < 1 {
		fmt.Fprintln(os.Stderr, "usage: watermill -brokers host:port -topic t -group g -order unordered|key -inflight n -work d")
		os.Exit(2)
	}

	logger := watermill.NewStdLoggerWithOut(os.Stderr, false, false)

	sc := kafka.DefaultSaramaSubscriberConfig()
	// Kafka 4 refuses the protocol versions of Watermill's default (1.0).
	sc.Version = sarama.V3_6_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// Fetch up to 1 MiB per partition and keep 1,024 records buffered per
	// partition claim so a partition never waits on a fetch between calls.
	sc.Consumer.Fetch.Default = 1 << 20
	sc.ChannelBufferSize = 1024
	sc.Consumer.Offsets.AutoCommit.Enable = true
	sc.Consumer.Offsets.AutoCommit.Interval = time.Second

	st := &stats{perPart: map[int32]int64{}}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               []string{*brokers},
		Unmarshaler:           stampingUnmarshaler{st: st},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         *group,
		NackResendSleep:       kafka.NoSleep,
	}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "subscriber:", err)
		os.Exit(1)
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}

	sem := make(chan struct{}, *inflight)
	router.AddNoPublisherHandler("peers", *topic, sub, func(msg *message.Message) error {
		ctx := msg.Context()
		part, _ := kafka.MessagePartitionFromCtx(ctx)
		ts, _ := kafka.MessageTimestampFromCtx(ctx)
		received, _ := strconv.ParseInt(msg.Metadata.Get(receivedKey), 10, 64)

		sem <- struct{}{}
		n := st.inflight.Add(1)
		for {
			m := st.maxInflight.Load()
			if n <= m || st.maxInflight.CompareAndSwap(m, n) {
				break
			}
		}
		t := time.NewTimer(*work)
		<-t.C
		done := time.Now().UnixNano()
		st.inflight.Add(-1)
		<-sem

		st.done(part, ts.UnixNano(), received, done)
		return nil
	})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	select {
	case <-ctx.Done():
	case err := <-runErr:
		fmt.Fprintln(os.Stderr, "router stopped:", err)
	}
	stop()
	// Close waits for running handlers up to CloseTimeout; the in-flight
	// calls are 2 ms long so this finishes them.
	closed := make(chan struct{})
	go func() { _ = router.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(7 * time.Second):
		fmt.Fprintln(os.Stderr, "router close timed out; reporting anyway")
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	per := make(map[string]int64, len(st.perPart))
	for p, n := range st.perPart {
		per[strconv.Itoa(int(p))] = n
	}
	out := map[string]any{
		"event":         "final",
		"processed":     st.processed,
		"per_partition": per,
		"p50_ms":        quantileMs(st.latency, 0.50),
		"p99_ms":        quantileMs(st.latency, 0.99),
		"p99_inproc_ms": quantileMs(st.inproc, 0.99),
		"semantics":     "at-least-once",
		"notes": fmt.Sprintf("watermill v1.4.6 router, one handler, watermill-kafka v3.0.6 subscriber in a consumer group "+
			"(Sarama %s protocol, OffsetOldest, Fetch.Default 1 MiB, ChannelBufferSize 1024, autocommit of marked offsets every 1 s); "+
			"watermill-kafka waits for each message's ack before reading its partition again, so at most one call per partition is in flight "+
			"(max seen %d with -inflight %d); -order %s: both variants are per-partition sequential in offset order",
			sc.Version, st.maxInflight.Load(), *inflight, *order),
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
