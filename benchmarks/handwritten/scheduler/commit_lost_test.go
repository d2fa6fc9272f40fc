package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A request whose outcome could not be written (its dead letter, or its
// compensation event, refused by the broker) is not done: its offset must
// not be committed, or it is lost, neither delivered nor compensated nor
// dead-lettered. The worker marks every record done once process returns,
// error or not (consume: handle, then commits.done), so the offset is
// committed.
func TestRequestWhoseOutcomeWasNotWrittenIsNotCommitted(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests", "failures", "dead"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "requests", Key: []byte("d-1"), Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// From now on the broker refuses every produce: the dead letter is
	// not written.
	refused := make(chan struct{}, 1)
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		select {
		case refused <- struct{}{}:
		default:
		}
		return resp, nil, true
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, config{brokers: brokers[0], backends: "http://127.0.0.1:1", redisAddr: "127.0.0.1:1",
			listen: "127.0.0.1:0", group: "g", requests: "requests", failures: "failures", dead: "dead",
			workers: 2, session: 6 * time.Second})
	}()
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("the worker never tried to write the dead letter")
	}
	// run drains its pool (the refused dead letter's process returns) and
	// commits what it counts as done before it returns.
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("requests", 0); ok && o.At > 0 {
		t.Fatalf("the request's dead letter was refused, yet its offset was committed (%d): it is lost", o.At)
	}
}
