package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/source/kafka"
)

// A worker with more calls ready than connections (or CPUs) to send them
// on makes them wait, not time out: the scheduler times each attempt from
// its send. Here 64 calls of a step share 2 connections to services that
// take 10 ms: a call waits about 320 ms for a connection, more than the
// 200 ms attempt timeout. Timed from the call's start, attempts timed out
// and their requests were compensated (before TimeoutFromSend: 0 of 100
// completed); timed from the send, every request completes, as slowly as
// the connections allow.
func TestCallsWaitingForAConnectionDoNotTimeOut(t *testing.T) {
	if testing.Short() {
		t.Skip("holds calls waiting for connections for seconds: make test runs it, -short does not")
	}
	const n = 100
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(4, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	quiet := slog.New(slog.DiscardHandler)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, requestRecord("requests", fmt.Sprint(i), fmt.Sprintf("d-%03d", i)))
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	ledger := delivery.NewLedger()
	h := delivery.HTTPHandler(delivery.Simulated(delivery.SimConfig{}, ledger, nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(10 * time.Millisecond)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := delivery.NewHTTPClient(2)
	defer client.CloseIdleConnections()
	src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "sent",
		Topics: []string{"requests"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sch, err := delivery.NewScheduler(delivery.SchedulerConfig{Source: src, Committer: src, Backends: delivery.HTTPBackends(srv.URL, client),
		Producer: producer, FailuresTopic: "failures", DeadLetterTopic: "dead", Parallelism: 64, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sch.Graph.Run(ctx) }()
	settled := func() int64 {
		var c int64
		for _, p := range src.Stats().Partitions {
			c += p.Committed
		}
		return c
	}
	for deadline := time.Now().Add(60 * time.Second); settled() < n; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the scheduler stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests settled within 60 s", settled(), n)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = src.Close(context.Background())
	if live, undone := ledger.LiveCount("deliveries"), ledger.UndoneCount("packages"); live != n || undone != 0 {
		t.Fatalf("%d of %d requests completed, %d compensated; want every one completed", live, n, undone)
	}
}
